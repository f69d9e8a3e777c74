import { copyFileSync, existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPrincipal } from '../../../src/broker/principals.js';
import type { TaskView } from '../../../src/contracts/views.js';
import { openStore } from '../../../src/master/data-dir.js';
import { systemClock } from '../../../src/platform/clock.js';
import { createIdGenerator } from '../../../src/platform/ids.js';
import { createCaTrustingFetch } from '../../../src/platform/tls.js';
import { ensureBuilt } from '../../support/build.js';
import { type ChildMaster, spawnMaster } from '../../support/cli.js';
import { approveTask, clusterConfig, getTask, shellSpec, waitUntilSettled } from '../../support/cluster.js';
import { connectMcpClient } from '../../support/mcp.js';
import { makeGateDir, makeTempDir, removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';
import { startTestWorker, type TestWorker } from '../../support/worker.js';

/**
 * Backup and restore, end to end (docs/operations.md "Backups and restores").
 * A real `gpu-broker serve` child process and a real worker with one card. The database is backed up
 * online (SQLite's backup API, what `sqlite3 broker.db ".backup …"` uses), task A starts on the card,
 * the master is SIGKILLed and the backup restored (stale -wal/-shm removed) — a master that has never
 * heard of A. Task B, submitted to it, must never run on A's card while A runs: the worker's hello
 * carries the card epochs it saw and the cards its executions hold, so the card is held (BUSY_FOREIGN)
 * and every new lease is above A's epoch. Once A ends and the worker confirms cleanup, B runs.
 */

let dataDir: string;
let gates: string;
let master: ChildMaster;
let port: number;
let w: TestWorker;
const config = clusterConfig({ timing: { lease_grace_seconds: 30 } });
const tokens = { alice: '', rita: '', worker: '' };
let clients: { alice: Client; rita: Client; close(): Promise<void> } | null = null;

async function connectClients(): Promise<NonNullable<typeof clients>> {
  const trusting = createCaTrustingFetch(readFileSync(master.caFile!, 'utf8'));
  const [alice, rita] = await Promise.all([
    connectMcpClient(master.url, tokens.alice, trusting.fetch),
    connectMcpClient(master.url, tokens.rita, trusting.fetch),
  ]);
  return {
    alice,
    rita,
    async close() {
      await Promise.allSettled([alice.close(), rita.close()]);
      await trusting.close();
    },
  };
}

beforeAll(async () => {
  ensureBuilt();
  dataDir = makeTempDir('restore-master');
  gates = makeGateDir('restore-gates');
  const store = openStore(dataDir);
  const deps = { store, clock: systemClock, ids: createIdGenerator() };
  tokens.alice = createPrincipal(deps, { name: 'alice', roles: ['submitter'] }).token;
  tokens.rita = createPrincipal(deps, { name: 'rita', roles: ['reviewer'] }).token;
  tokens.worker = createPrincipal(deps, { name: 'w', roles: ['worker'], worker_id: 'gpu-b' }).token;
  store.close();
  master = await spawnMaster(dataDir, [], { config });
  port = Number(new URL(master.url).port);
  w = await startTestWorker({
    url: master.url,
    caPem: readFileSync(master.caFile!, 'utf8'),
    token: tokens.worker,
    workerId: 'gpu-b',
    simCards: 1,
  });
  clients = await connectClients();
});

afterAll(async () => {
  await clients?.close();
  await w?.close();
  await master?.stop('SIGTERM');
  removeTempDirs();
});

/** Whether the worker's own log files of any execution contain `text`. */
function workerLogged(text: string): boolean {
  const dir = join(w.dataDir, 'executions');
  if (!existsSync(dir)) return false;
  return readdirSync(dir).some((e) => {
    const log = join(dir, e, 'stdout.log');
    return existsSync(log) && readFileSync(log, 'utf8').includes(text);
  });
}

describe('SIGKILL, then restore an older backup', () => {
  it('never runs a new task on a card the worker still holds for a task the backup does not know', async () => {
    const c = clients!;
    // 1. An online backup while the master runs and the worker is connected.
    const backup = join(makeTempDir('backup'), 'broker-backup.db');
    await waitFor(async () => (await c.alice.callTool({ name: 'list_cards', arguments: {} })) !== null);
    const live = new Database(join(dataDir, 'broker.db'), { readonly: true, fileMustExist: true });
    try {
      await live.backup(backup);
    } finally {
      live.close();
    }

    // 2. Task A runs on the only card, held open by a gate.
    const gateA = join(gates, 'A');
    const a = await approveTask(
      c.alice,
      c.rita,
      shellSpec(`echo "A started"; while [ ! -e '${gateA}' ]; do sleep 0.05; done; echo "A finished"`, {
        title: 'A',
      }),
    );
    await waitFor(async () => (await getTask(c.alice, a)).state === 'RUNNING' && workerLogged('A started'), {
      what: 'A running on the worker',
      timeoutMs: 20_000,
    });
    const epochA = (await getTask(c.alice, a)).lease_epoch!;
    expect(epochA).toBeGreaterThan(0);

    // 3. SIGKILL; restore the backup as the docs say: the file in place, stale -wal/-shm removed.
    await c.close();
    clients = null;
    expect(await master.stop('SIGKILL')).toEqual({ code: null, signal: 'SIGKILL' });
    copyFileSync(backup, join(dataDir, 'broker.db'));
    rmSync(join(dataDir, 'broker.db-wal'), { force: true });
    rmSync(join(dataDir, 'broker.db-shm'), { force: true });
    master = await spawnMaster(dataDir, [], { config, listen: `127.0.0.1:${port}` });
    clients = await connectClients();
    const r = clients;
    // The restored master has never heard of A.
    const unknown = await r.alice.callTool({ name: 'get_task', arguments: { task_id: a } });
    expect(unknown.isError).toBe(true);

    // The worker reconnected and said at hello what its executions hold: the card is busy, not free.
    await waitFor(
      async () => {
        const res = await r.alice.callTool({ name: 'list_cards', arguments: {} });
        const cards = (res.structuredContent as { cards: Array<{ worker_id: string; state: string }> }).cards;
        return cards.some((card) => card.worker_id === 'gpu-b' && card.state === 'BUSY_FOREIGN');
      },
      { what: "A's card BUSY_FOREIGN on the restored master", timeoutMs: 20_000 },
    );

    // 4. Task B on the restored master: it waits while A runs.
    const gateB = join(gates, 'B');
    const b = await approveTask(
      r.alice,
      r.rita,
      shellSpec(`if [ -e '${gateB}' ]; then echo "B after A"; else echo "B beside A"; fi`, { title: 'B' }),
    );
    const waiting = await waitFor(
      async () => {
        const t = await getTask(r.alice, b);
        return t.state === 'QUEUED' && t.reason !== null ? t : null;
      },
      { what: 'B queued with a wait reason', timeoutMs: 20_000 },
    );
    expect(waiting.reason).toMatchObject({ code: expect.any(String) });
    expect((await getTask(r.alice, b)).state).toBe('QUEUED');
    expect(workerLogged('B beside A')).toBe(false);

    // 5. A ends (B's script tells from gate B whether it started after that), the worker cleans up.
    copyFileSync(backup, gateB); // any file: B's marker that A was let go
    copyFileSync(backup, gateA);
    const done: TaskView = await waitUntilSettled(r.alice, b, 30_000);
    expect(done).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
    expect(workerLogged('A finished')).toBe(true);
    expect(workerLogged('B after A')).toBe(true);
    expect(workerLogged('B beside A')).toBe(false);
    // B's lease is fenced above every epoch the worker had seen (learned at hello).
    expect(done.lease_epoch!).toBeGreaterThan(epochA);
  });
});
