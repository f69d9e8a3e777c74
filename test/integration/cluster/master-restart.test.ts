import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPrincipal } from '../../../src/broker/principals.js';
import { openStore } from '../../../src/master/data-dir.js';
import { systemClock } from '../../../src/platform/clock.js';
import { createIdGenerator } from '../../../src/platform/ids.js';
import { createCaTrustingFetch } from '../../../src/platform/tls.js';
import { ensureBuilt } from '../../support/build.js';
import { type ChildMaster, spawnMaster } from '../../support/cli.js';
import { clusterConfig, getTask, shellSpec, waitUntilSettled } from '../../support/cluster.js';
import { callTool, connectMcpClient, expectOk } from '../../support/mcp.js';
import { startTcpProxy, type TcpProxy } from '../../support/tcp-proxy.js';
import { makeGateDir, makeTempDir, removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';
import { startTestWorker, type TestWorker } from '../../support/worker.js';

/**
 * The master is killed with SIGKILL while tasks run (`gpu-broker serve` in a child process), and started
 * again on the same port and data dir. Tasks, leases and the outbox come back from SQLite; the worker
 * re-attaches on its own and delivers what happened meanwhile; an assign that never reached the worker
 * before the kill is sent again from the outbox; every task completes and no card is leased twice.
 */

interface Status {
  leases: Array<{ task_id: string | null; worker_id: string; cards: number[]; state: string }>;
  alerts: Array<{ kind: string }>;
  tasks_by_state: Record<string, number>;
}

// Samples once a second and offline after 3 s: the link is held (black-holed) before one approval, and
// the cards must still count as fresh (3 intervals) and the worker as online when that grant is made.
const config = clusterConfig({
  timing: { sample_interval_ms: 1000, worker_offline_seconds: 3, lease_grace_seconds: 5 },
});
let dataDir: string;
let gates: string;
let master: ChildMaster;
let port: number;
let proxy: TcpProxy;
let w: TestWorker;
const tokens: Record<'alice' | 'rita' | 'op' | 'worker', string> = {
  alice: '',
  rita: '',
  op: '',
  worker: '',
};
let clients: { alice: Client; rita: Client; op: Client; close(): Promise<void> };

async function connectClients(): Promise<typeof clients> {
  const trusting = createCaTrustingFetch(readFileSync(master.caFile!, 'utf8'));
  const connect = (token: string) => connectMcpClient(master.url, token, trusting.fetch);
  const [alice, rita, op] = await Promise.all([
    connect(tokens.alice),
    connect(tokens.rita),
    connect(tokens.op),
  ]);
  return {
    alice,
    rita,
    op,
    async close() {
      await Promise.allSettled([alice.close(), rita.close(), op.close()]);
      await trusting.close();
    },
  };
}

beforeAll(async () => {
  ensureBuilt();
  dataDir = makeTempDir('restart-master');
  gates = makeGateDir('restart-gates');
  // Tokens are made in the data dir before the first start (the store is then the child's alone).
  const store = openStore(dataDir);
  const deps = { store, clock: systemClock, ids: createIdGenerator() };
  tokens.alice = createPrincipal(deps, { name: 'alice', roles: ['submitter'] }).token;
  tokens.rita = createPrincipal(deps, { name: 'rita', roles: ['reviewer'] }).token;
  tokens.op = createPrincipal(deps, { name: 'op', roles: ['operator'] }).token;
  tokens.worker = createPrincipal(deps, { name: 'w', roles: ['worker'], worker_id: 'gpu-r' }).token;
  store.close();
  master = await spawnMaster(dataDir, [], { config });
  port = Number(new URL(master.url).port);
  proxy = await startTcpProxy(master.url);
  w = await startTestWorker({
    url: proxy.url,
    caPem: readFileSync(master.caFile!, 'utf8'),
    token: tokens.worker,
    workerId: 'gpu-r',
    simCards: 4,
  });
  clients = await connectClients();
});

afterAll(async () => {
  await clients?.close();
  proxy?.restore();
  await w?.close();
  await proxy?.close();
  await master?.stop('SIGTERM');
  removeTempDirs();
});

let keys = 0;
const key = () => `restart-${++keys}`;

/** Up to (and including) confirm_revision; returns what submit_review needs. */
async function proposeAndConfirm(spec: ReturnType<typeof shellSpec>) {
  const r = expectOk(
    await callTool<{ proposal_id: string; revision_id: string; digest: string }>(
      clients.alice,
      'create_proposal',
      {
        spec,
        idempotency_key: key(),
      },
    ),
  );
  expectOk(
    await callTool(clients.alice, 'confirm_revision', {
      proposal_id: r.proposal_id,
      revision_id: r.revision_id,
      idempotency_key: key(),
    }),
  );
  return r;
}

async function approve(r: { proposal_id: string; revision_id: string; digest: string }): Promise<string> {
  const out = expectOk(
    await callTool<{ task_id: string }>(clients.rita, 'submit_review', {
      proposal_id: r.proposal_id,
      revision_id: r.revision_id,
      revision_digest: r.digest,
      decision: 'APPROVE',
      comments: 'ok',
      idempotency_key: key(),
    }),
  );
  return out.task_id;
}

function gated(name: string, count: number) {
  const gate = join(gates, name);
  return shellSpec(
    [
      `echo "started ${name} on $GPU_BROKER_GPU_IDS"`,
      `while [ ! -e '${gate}' ]; do sleep 0.05; done`,
      `echo "${name}" > "$GPU_BROKER_OUTPUT_DIR/result.json"`,
      `echo "finished ${name}"`,
    ].join('\n'),
    { cards: { count }, outputs: [{ path: 'result.json', required: true }], title: name },
  );
}

/** Whether some execution of the worker logged `text` (read from the worker's own files). */
function workerLogged(text: string): boolean {
  const dir = join(w.dataDir, 'executions');
  if (!existsSync(dir)) return false;
  return readdirSync(dir).some((e) => {
    const log = join(dir, e, 'stdout.log');
    return existsSync(log) && readFileSync(log, 'utf8').includes(text);
  });
}

describe('master killed with SIGKILL mid-run', () => {
  it('recovers tasks, leases and the outbox; the worker re-attaches; every task completes', async () => {
    await waitFor(
      async () => {
        const cards = expectOk(
          await callTool<{ cards: Array<{ state: string }> }>(clients.op, 'list_cards', {}),
        );
        return cards.cards.filter((c) => c.state === 'AVAILABLE').length === 4;
      },
      { what: 'four available cards' },
    );
    // 1. Two tasks running (3 of the 4 cards).
    const long = await approve(await proposeAndConfirm(gated('long', 2)));
    const short = await approve(await proposeAndConfirm(gated('short', 1)));
    await waitFor(() => workerLogged('started long') && workerLogged('started short'), {
      what: 'both tasks running',
    });
    await waitFor(async () => (await getTask(clients.alice, short)).state === 'RUNNING');
    await waitFor(async () => (await getTask(clients.alice, long)).state === 'RUNNING');

    // 2. An assign that the master commits but the worker never receives: the link black-holes first.
    const late = await proposeAndConfirm(gated('late', 1));
    proxy.hold();
    const lateId = await approve(late);
    await waitFor(async () => (await getTask(clients.alice, lateId)).state === 'ASSIGNED', {
      what: 'the late task assigned before the kill',
    });

    // 3. SIGKILL, while the worker goes on: one task finishes while no master is there.
    expect(await master.stop('SIGKILL')).toEqual({ code: null, signal: 'SIGKILL' });
    await clients.close();
    proxy.cut();
    proxy.restore();
    writeFileSync(join(gates, 'short'), '');
    await waitFor(() => workerLogged('finished short'), { what: 'the short task finishing offline' });
    expect(workerLogged('started late')).toBe(false);

    // 4. Same port, same data dir.
    master = await spawnMaster(dataDir, [], { config, listen: `127.0.0.1:${port}` });
    clients = await connectClients();
    await waitFor(() => w.worker.isConnected(), { what: 'the worker re-attached' });

    const shortDone = await waitUntilSettled(clients.alice, short);
    expect(shortDone).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
    const lateStarted = await waitFor(
      async () => {
        const t = await getTask(clients.alice, lateId);
        return t.state === 'RUNNING' ? t : null;
      },
      { what: 'the late assign delivered from the outbox after the restart' },
    );
    expect(lateStarted.cards).toHaveLength(1);
    expect((await getTask(clients.alice, long)).state).toBe('RUNNING');

    const status = expectOk(await callTool<Status>(clients.op, 'get_status', {}));
    const held = status.leases.flatMap((l) => l.cards.map((c) => `${l.worker_id}/${c}`));
    expect(new Set(held).size).toBe(held.length);
    expect(status.leases.map((l) => l.state).sort()).toEqual(['ACTIVE', 'ACTIVE']);
    expect(status.alerts.map((a) => a.kind)).not.toContain('card_quarantined');
    expect(status.alerts.map((a) => a.kind)).not.toContain('task_needs_reconciliation');

    // 5. The rest finish normally.
    writeFileSync(join(gates, 'long'), '');
    writeFileSync(join(gates, 'late'), '');
    for (const id of [long, lateId]) {
      const done = await waitUntilSettled(clients.alice, id);
      expect(done).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
      const outputs = expectOk(
        await callTool<{ outputs: Array<{ path: string }> }>(clients.alice, 'get_task_outputs', {
          task_id: id,
        }),
      );
      expect(outputs.outputs.map((o) => o.path)).toEqual(['result.json']);
    }
    const logs = expectOk(
      await callTool<{ data: string }>(clients.alice, 'get_task_logs', { task_id: short }),
    );
    expect(logs.data).toMatch(/^started short on \d\nfinished short\n$/);
    const final = expectOk(await callTool<Status>(clients.op, 'get_status', {}));
    expect(final.leases).toEqual([]);
    expect(final.tasks_by_state).toMatchObject({ COMPLETED: 3 });
    expect(final.alerts.filter((a) => a.kind !== 'worker_offline')).toEqual([]);
  });
});
