import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  approveTask,
  clusterConfig,
  getTask,
  type LeaseWatch,
  shellSpec,
  waitUntilSettled,
  watchLeaseCards,
} from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { makeGateDir, removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * Two workers with 4 simulated cards each and a stream of tasks of mixed sizes. Each task records, on
 * the worker, when it started and ended and which cards it saw; the test then checks that no two tasks
 * ever overlapped on one card, besides checking the master's live leases after every state change.
 */

interface Logs {
  data: string;
}

let m: TestMaster;
let workers: TestWorker[] = [];
let alice: Client;
let rita: Client;
let watch: LeaseWatch;
let gates: string;

beforeAll(async () => {
  // Every task that waits at all is aged at once, so the 4-card task below reserves cards from the
  // first release on, without the test waiting for a deadline.
  m = await startTestMaster({ config: clusterConfig({ scheduling: { reservation_after_seconds: 0 } }) });
  watch = watchLeaseCards(m.store, m.deps.notifier);
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  workers = await Promise.all([startWorkerOn(m, 'gpu-a'), startWorkerOn(m, 'gpu-b')]);
  await waitFor(() => availableCards() === 8, { what: 'eight available cards' });
  gates = makeGateDir('gates');
});

afterAll(async () => {
  watch?.stop();
  await Promise.all(workers.map((w) => w.close()));
  await m?.close();
  removeTempDirs();
});

function availableCards(): number {
  return m.deps.cluster.fleet
    .listCards(m.store, Date.now(), { sample_interval_ms: 200 })
    .filter((c) => c.state === 'AVAILABLE').length;
}

/** Prints "start NS CARDS WORKER", works for `seconds`, prints "end NS". */
function timedScript(seconds: number): string {
  return [
    'echo "start $(date +%s%N) $GPU_BROKER_GPU_IDS $GPU_BROKER_WORKER_ID"',
    `sleep ${seconds}`,
    'echo "end $(date +%s%N)"',
  ].join('\n');
}

/** Like timedScript, but works until the file `gate` exists. */
function gatedScript(gate: string): string {
  return [
    'echo "start $(date +%s%N) $GPU_BROKER_GPU_IDS $GPU_BROKER_WORKER_ID"',
    `while [ ! -e '${gate}' ]; do sleep 0.05; done`,
    'echo "end $(date +%s%N)"',
  ].join('\n');
}

interface Interval {
  task: string;
  worker: string;
  cards: string[];
  start: bigint;
  end: bigint;
}

async function intervalOf(taskId: string): Promise<Interval> {
  const logs = expectOk(await callTool<Logs>(alice, 'get_task_logs', { task_id: taskId }));
  const start = /^start (\d+) ([\d,]+) (\S+)$/m.exec(logs.data);
  const end = /^end (\d+)$/m.exec(logs.data);
  if (!start || !end) throw new Error(`task ${taskId} logged no interval: ${logs.data}`);
  return {
    task: taskId,
    worker: start[3]!,
    cards: start[2]!.split(','),
    start: BigInt(start[1]!),
    end: BigInt(end[1]!),
  };
}

/** Every pair of tasks that ran on the same card of the same worker at overlapping times. */
function overlaps(intervals: Interval[]): string[] {
  const found: string[] = [];
  for (let i = 0; i < intervals.length; i++) {
    for (let j = i + 1; j < intervals.length; j++) {
      const a = intervals[i]!;
      const b = intervals[j]!;
      if (a.worker !== b.worker || !a.cards.some((c) => b.cards.includes(c))) continue;
      if (a.start < b.end && b.start < a.end) found.push(`${a.task} and ${b.task} on ${a.worker}`);
    }
  }
  return found;
}

describe('two workers × 4 cards', () => {
  it('runs 20 tasks of mixed sizes, never two on one card, all to completion', async () => {
    const sizes = [1, 2, 4, 1, 3, 2, 1, 1, 4, 2, 1, 3, 1, 2, 1, 4, 1, 2, 1, 1];
    const ids: string[] = [];
    for (const [i, count] of sizes.entries()) {
      ids.push(
        await approveTask(
          alice,
          rita,
          shellSpec(timedScript(0.1 + (i % 4) * 0.1), { cards: { count }, title: `mixed ${i}` }),
        ),
      );
    }
    const settled = await Promise.all(ids.map((id) => waitUntilSettled(alice, id, 60_000)));
    expect(settled.map((t) => [t.state, t.failure_reason, t.failure_detail])).toEqual(
      sizes.map(() => ['COMPLETED', null, null]),
    );
    for (const [i, t] of settled.entries()) expect(t.cards).toHaveLength(sizes[i]!);

    const intervals = await Promise.all(ids.map(intervalOf));
    for (const [i, iv] of intervals.entries()) {
      expect(iv.cards).toEqual(settled[i]!.cards.map((c) => String(c.index)));
      expect(iv.worker).toBe(settled[i]!.worker_id);
    }
    expect(overlaps(intervals)).toEqual([]);
    expect(watch.violations).toEqual([]);
    expect(watch.checks()).toBeGreaterThan(40);
    // More than one task ran at a time: the check above was not vacuous.
    expect(watch.peak()).toBeGreaterThan(4);
    expect(m.store.leases.liveLeases()).toEqual([]);
  });

  it('reserves a worker for a waiting 4-card task instead of starving it behind 1-card tasks', async () => {
    mkdirSync(gates, { recursive: true });
    // 1. eight 1-card blockers fill both workers.
    const blockers: string[] = [];
    for (let i = 0; i < 8; i++)
      blockers.push(
        await approveTask(
          alice,
          rita,
          shellSpec(gatedScript(join(gates, `blocker-${i}`)), { title: `blocker ${i}` }),
        ),
      );
    await waitFor(async () => (await Promise.all(blockers.map((b) => getTask(alice, b)))).every(running), {
      what: 'eight running blockers',
    });
    // 2. the 4-card task, then a stream of 1-card tasks behind it.
    const big = await approveTask(
      alice,
      rita,
      shellSpec(timedScript(0.2), { cards: { count: 4 }, title: 'big' }),
    );
    const small: string[] = [];
    for (let i = 0; i < 4; i++)
      small.push(await approveTask(alice, rita, shellSpec(timedScript(0.1), { title: `small ${i}` })));
    await waitFor(async () => (await getTask(alice, big)).reason?.['code'] === 'waiting_for_cards', {
      what: 'the 4-card task waiting for cards',
    });

    // 3. one blocker ends: its card is held for the big task, and the small ones may not take it.
    const placement = await Promise.all(blockers.map((b) => getTask(alice, b)));
    const target = placement[0]!.worker_id!;
    const onTarget = blockers.filter((_, i) => placement[i]!.worker_id === target);
    const elsewhere = blockers.filter((_, i) => placement[i]!.worker_id !== target);
    expect(onTarget).toHaveLength(4);
    writeFileSync(join(gates, `blocker-${blockers.indexOf(onTarget[0]!)}`), '');
    const holding = await waitFor(
      async () => {
        const t = await getTask(alice, big);
        return t.reason?.['code'] === 'holding_reservation' ? t : null;
      },
      { what: 'the 4-card task holding a reservation' },
    );
    expect(holding.reason).toMatchObject({ worker_id: target, held: 1, need: 4 });
    const firstSmall = await getTask(alice, small[0]!);
    expect(firstSmall.state).toBe('QUEUED');
    expect(firstSmall.reason).toMatchObject({ code: 'reserved_for_older_task', worker_id: target });

    // 4. the rest of that worker's blockers end: the big task starts there before any small one.
    for (const b of onTarget.slice(1)) writeFileSync(join(gates, `blocker-${blockers.indexOf(b)}`), '');
    const bigDone = await waitUntilSettled(alice, big);
    expect(bigDone).toMatchObject({ state: 'COMPLETED', worker_id: target });
    expect(bigDone.cards.map((c) => c.index)).toEqual([0, 1, 2, 3]);
    const bigStarted = Date.parse(bigDone.started_at!);
    for (const s of small) {
      const t = await getTask(alice, s);
      if (t.started_at !== null) expect(Date.parse(t.started_at)).toBeGreaterThanOrEqual(bigStarted);
    }

    // 5. everything else drains.
    for (const b of elsewhere) writeFileSync(join(gates, `blocker-${blockers.indexOf(b)}`), '');
    const rest = await Promise.all([...blockers, ...small].map((id) => waitUntilSettled(alice, id)));
    expect(rest.map((t) => t.state)).toEqual(rest.map(() => 'COMPLETED'));
    const intervals = await Promise.all([...blockers, big, ...small].map(intervalOf));
    expect(overlaps(intervals)).toEqual([]);
    expect(watch.violations).toEqual([]);
  });
});

function running(t: { state: string }): boolean {
  return t.state === 'RUNNING';
}
