import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { createCaTrustingFetch } from '../src/platform/tls.js';
import { startChildMaster } from './child-master.js';
import { BenchClients, callTool, keySequence, proposeAndApprove } from './harness.js';
import { type BenchWorker, startBenchWorker } from './in-process-worker.js';
import { type BenchSection, type OpResult, summarise } from './stats.js';

/**
 * Reclaim by preemption (docs/operations.md "Borrowing and reclaim", ADR 0044), end to end: a master in
 * its own process, one worker with 8 simulated cards (bwrap sandbox). Each round team-a (no nominal
 * share) fills the pool with four preemptible 2-card tasks; then team-b (nominal 4) asks for 2 cards.
 * Measured: team-b's task from approval to start (the master's clock), against the bound the issue asks
 * for — the preempted task's grace plus one scheduling pass — and the preempted task from then until it
 * finished its second run (queued again at its old place, no new review). Two kinds of victim: one that
 * checkpoints and exits at SIGTERM, and one that ignores SIGTERM and is killed at the end of its grace.
 */

const ROUNDS = Number(process.env['RECLAIM_ROUNDS'] ?? 5);
const GRACE_S = 2;

/** Finishes at once on a second run (or as team-b's quick task); else runs 6 s, stopping as MODE says at SIGTERM. */
const SCRIPT = `[ "$GPU_BROKER_PREEMPTED" = 1 ] && exit 0
[ "$MODE" = quick ] && exit 0
if [ "$MODE" = stubborn ]; then trap '' TERM; else trap 'exit 0' TERM; fi
i=0; while [ $i -lt 60 ]; do sleep 0.1; i=$((i+1)); done
`;

interface TaskFacts {
  state: string;
  approved_at: string | null;
  started_at: string | null;
}

async function task(c: Client, id: string): Promise<TaskFacts> {
  return (await callTool<{ task: TaskFacts }>(c, 'get_task', { task_id: id })).task;
}

async function until(c: Client, id: string, ok: (t: TaskFacts) => boolean, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const t = await task(c, id);
    if (ok(t)) return t;
    if (Date.now() > deadline) throw new Error(`task ${id} stuck in ${t.state}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

async function runReclaim(): Promise<OpResult[]> {
  const master = await startChildMaster({
    executables: [{ path: '/bin/sh' }],
    scripts: [{ interpreter: '/bin/sh', script_from_inputs: true }],
  });
  const trusting = createCaTrustingFetch(master.caPem);
  const clients = new BenchClients(master.url, trusting.fetch, 'bench-reclaim');
  let worker: BenchWorker | null = null;
  try {
    const ops = await clients.connect(await master.createToken('reclaim-ops', ['operator']));
    const nextKey = keySequence('reclaim');
    await callTool(ops, 'create_account', { name: 'team-a', idempotency_key: nextKey() });
    await callTool(ops, 'create_account', { name: 'team-b', nominal_cards: 4, idempotency_key: nextKey() });
    const alice = await clients.connect(
      await master.createToken('reclaim-alice', ['submitter'], undefined, 'team-a'),
    );
    const bob = await clients.connect(
      await master.createToken('reclaim-bob', ['submitter'], undefined, 'team-b'),
    );
    const rita = await clients.connect(await master.createToken('reclaim-rita', ['reviewer']));
    worker = await startBenchWorker(master, alice, { workerId: 'reclaim-worker', cards: 8 });
    const upload = async (c: Client) =>
      (
        await callTool<{ inputs: unknown[] }>(c, 'upload_inputs', {
          files: [{ path: 'run.sh', content: SCRIPT }],
          idempotency_key: nextKey(),
        })
      ).inputs;
    const aliceInputs = await upload(alice);
    const bobInputs = await upload(bob);
    const spec = (mode: string, inputs: unknown[], extra: Record<string, unknown>) => ({
      title: `reclaim ${mode}`,
      objective: 'bench',
      success_criteria: 'exits 0',
      cards: { count: 2 },
      runtime: { kind: 'process', argv: ['/bin/sh', 'run.sh'], env: { MODE: mode } },
      inputs,
      outputs: [],
      time_limit_seconds: 60,
      notes: 'bench',
      ...extra,
    });
    const rows: OpResult[] = [];
    for (const mode of ['cooperative', 'stubborn']) {
      const toStart: number[] = [];
      const toRequeuedDone: number[] = [];
      let errors = 0;
      const started = performance.now();
      for (let round = 0; round < ROUNDS; round++) {
        const fill: string[] = [];
        for (let i = 0; i < 4; i++)
          fill.push(
            await proposeAndApprove(
              alice,
              rita,
              spec(mode, aliceInputs, { preemptible: true, preemption_grace_seconds: GRACE_S }),
              nextKey,
            ),
          );
        for (const id of fill) await until(alice, id, (t) => t.state === 'RUNNING', 30_000);
        const b = await proposeAndApprove(bob, rita, spec('quick', bobInputs, {}), nextKey);
        const bt = await until(bob, b, (t) => t.started_at !== null, 30_000);
        const t0 = performance.now();
        toStart.push(Date.parse(bt.started_at!) - Date.parse(bt.approved_at!));
        // The newest of the four was preempted: it finishes its second run; the others finish their 6 s.
        const ended = await Promise.all(
          fill.map((id) =>
            until(alice, id, (t) => ['COMPLETED', 'FAILED', 'CANCELLED'].includes(t.state), 30_000),
          ),
        );
        if (ended.some((t) => t.state !== 'COMPLETED')) errors++;
        toRequeuedDone.push(performance.now() - t0);
        await until(bob, b, (t) => t.state === 'COMPLETED', 30_000);
      }
      const seconds = (performance.now() - started) / 1000;
      const bound = `bound: grace ${GRACE_S} s + one pass`;
      rows.push(
        summarise(
          'reclaim',
          `${mode} victim: team-b's task approval → started (ms)`,
          toStart,
          errors,
          seconds,
          `${ROUNDS} rounds; 8 sim cards full of team-a's preemptible 2-card tasks; ${bound}`,
        ),
        summarise(
          'reclaim',
          `${mode} victim: team-b started → every team-a task done (preempted one requeued)`,
          toRequeuedDone,
          errors,
          seconds,
          'the preempted task runs again (GPU_BROKER_PREEMPTED=1) and completes; the other three run their 6 s',
        ),
      );
    }
    return rows;
  } finally {
    await worker?.close();
    await clients.close();
    await master.stop();
  }
}

export const reclaimSection: BenchSection = {
  name: 'reclaim',
  description:
    "reclaim by preemption: team-a borrows the whole pool, team-b asks within its nominal share; team-b's start against the grace + one pass, the preempted task requeued and finished",
  run: runReclaim,
};
