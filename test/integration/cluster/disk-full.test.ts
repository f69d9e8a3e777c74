import { execFileSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { approveTask, clusterConfig, getTask, shellSpec, waitUntilSettled } from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectError, expectOk } from '../../support/mcp.js';
import { isRoot, requireOrSkip } from '../../support/require-or-skip.js';
import { validSpec } from '../../support/spec.js';
import { makeGateDir, makeTempDir } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';
import { startWorkerOn, type TestWorker } from '../../support/worker.js';

/**
 * ADR 0016 with a real worker: a task streams its log while the master's store cannot take it —
 * first because the (fake) disk is under `storage.min_free_bytes`, then because SQLite itself answers
 * SQLITE_FULL (a `max_page_count` the database reaches). The master answers the worker's log messages
 * UNAVAILABLE and does not acknowledge them; the worker keeps them in its outbox (and the task's later
 * reports behind them) and redials after a delay; the task is not taken for lost. Once space returns,
 * everything lands in order and the task completes normally with its whole log.
 */

const GiB = 1024 * 1024 * 1024;
const MiB = 1024 * 1024;

let free = 10 * GiB;
let m: TestMaster;
let w: TestWorker;
let alice: Client;
let rita: Client;
let gates: string;

beforeAll(async () => {
  m = await startTestMaster({
    config: clusterConfig({ storage: { check_interval_ms: 3_600_000 } }),
    statfs: async () => ({ free_bytes: free, total_bytes: 20 * GiB }),
  });
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
  w = await startWorkerOn(m, 'gpu-full', { simCards: 1 });
  await waitFor(() => m.deps.cluster.fleet.get('gpu-full').cards.length === 1, { what: 'one card' });
  gates = makeGateDir('disk-full');
});

afterAll(async () => {
  await w?.close();
  await m?.close();
});

/** The worker's unacknowledged outbox messages (read from its own SQLite file). */
function workerOutbox(): Array<{ type: string; phase?: string }> {
  const db = new Database(join(w.dataDir, 'worker.sqlite'), { readonly: true, fileMustExist: true });
  try {
    return (
      db.prepare('SELECT message_json FROM outbox WHERE acked_at IS NULL ORDER BY id').all() as Array<{
        message_json: string;
      }>
    ).map((r) => JSON.parse(r.message_json) as { type: string; phase?: string });
  } finally {
    db.close();
  }
}

/** A task that prints `before` lines, waits for its gate, prints `after` lines of `width` chars, exits 0. */
function loudGated(name: string, before: number, after: number, width: number) {
  const gate = join(gates, name);
  const pad = 'y'.repeat(width);
  return {
    gate,
    spec: shellSpec(
      [
        `i=0; while [ $i -lt ${before} ]; do echo "before $i"; i=$((i+1)); done`,
        `while [ ! -e '${gate}' ]; do sleep 0.05; done`,
        `i=0; while [ $i -lt ${after} ]; do echo "after $i ${pad}"; i=$((i+1)); done`,
      ].join('\n'),
      { title: name },
    ),
  };
}

async function logText(taskId: string): Promise<string> {
  let text = '';
  let offset = 0;
  for (;;) {
    const page = expectOk(
      await callTool<{ data: string; next_offset: number; total_bytes: number }>(alice, 'get_task_logs', {
        task_id: taskId,
        offset,
        max_bytes: 1048576,
      }),
    );
    text += page.data;
    if (page.next_offset >= page.total_bytes || page.next_offset === offset) return text;
    offset = page.next_offset;
  }
}

async function firstLogsLanded(taskId: string) {
  await waitFor(
    async () =>
      (await getTask(alice, taskId)).state === 'RUNNING' && (await logText(taskId)).includes('before 9\n'),
    { what: 'the task runs and its first lines landed', timeoutMs: 20_000 },
  );
}

/** The worker finished the task (its cleanup receipt waits in the outbox) while the master could not store. */
async function finishedOnWorkerOnly(taskId: string) {
  await waitFor(
    () => {
      const unacked = workerOutbox();
      return unacked.some((msg) => msg.type === 'log') && unacked.some((msg) => msg.phase === 'cleaned');
    },
    {
      what: 'log messages and the cleanup receipt kept unacknowledged in the worker outbox',
      timeoutMs: 20_000,
    },
  );
  // The master did not take the task for lost: it still runs there, waiting for the reports.
  expect((await getTask(alice, taskId)).state).toBe('RUNNING');
}

async function completesWithWholeLog(taskId: string, after: number) {
  const done = await waitUntilSettled(alice, taskId, 30_000);
  expect(done).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
  const text = await logText(taskId);
  const lines = text.split('\n').filter((l) => l.startsWith('after '));
  expect(lines.length).toBe(after);
  expect(lines.map((l) => Number(l.split(' ')[1]))).toEqual(Array.from({ length: after }, (_, i) => i));
  expect(text.startsWith('before 0\n')).toBe(true);
  await waitFor(() => workerOutbox().length === 0, { what: 'the worker outbox drained' });
}

describe('a master whose disk fills while a task streams its log', () => {
  it('under min_free_bytes: logs are refused unacknowledged, kept by the worker, and land once space returns', async () => {
    const t = loudGated('guard', 10, 300, 20);
    const id = await approveTask(alice, rita, t.spec);
    await firstLogsLanded(id);
    free = 100 * MiB;
    await m.master.storage.check();
    writeFileSync(t.gate, '');
    await finishedOnWorkerOnly(id);
    const health = await m.rest(null).get<{ storage: { state: string } }>('/healthz');
    expect(health.status).toBe(503);
    expect(health.body.storage.state).toBe('refusing');
    expectError(
      await callTool(alice, 'create_proposal', { spec: validSpec(), idempotency_key: m.key() }),
      'UNAVAILABLE',
    );
    expect(m.store.tasks.inState('RECONCILIATION_REQUIRED')).toEqual([]);
    free = 10 * GiB;
    await m.master.storage.check();
    await completesWithWholeLog(id, 300);
  });

  it('on a real SQLITE_FULL: the same, and /healthz says the store cannot write until a probe write works', async () => {
    const t = loudGated('sqlite-full', 10, 4000, 200);
    const id = await approveTask(alice, rita, t.spec);
    await firstLogsLanded(id);
    const db = m.store.db;
    db.pragma(`max_page_count = ${db.pragma('page_count', { simple: true }) as number}`);
    try {
      writeFileSync(t.gate, '');
      await finishedOnWorkerOnly(id);
      const health = await waitFor(async () => {
        const res = await m.rest(null).get<{ storage: { state: string; detail?: string } }>('/healthz');
        return res.status === 503 ? res : null;
      });
      expect(health.body.storage.state).toBe('unwritable');
      expect(health.body.storage.detail).toMatch(/SQLITE_FULL/);
      expect(m.store.tasks.inState('RECONCILIATION_REQUIRED')).toEqual([]);
    } finally {
      db.pragma('max_page_count = 1073741823');
    }
    await m.master.storage.check();
    expect((await m.rest(null).get('/healthz')).status).toBe(200);
    await completesWithWholeLog(id, 4000);
  });
});

/** Mounts a tmpfs of `size` on a fresh dir (needs root, as the sandbox tests do). */
function mountTmpfs(size: string): string {
  const dir = makeTempDir('tmpfs');
  execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size},mode=0700`, 'tmpfs', dir], { stdio: 'ignore' });
  return dir;
}

describe.runIf(requireOrSkip('root', isRoot, 'mounting a tmpfs needs it'))(
  'a master whose data dir sits on a filesystem that really fills up',
  () => {
    let tmpfs: string | null = null;
    let full: TestMaster;
    let fw: TestWorker;
    let submitter: Client;
    let reviewer: Client;

    beforeAll(async () => {
      tmpfs = mountTmpfs('4m');
      const dataDir = join(tmpfs, 'master');
      mkdirSync(dataDir, { mode: 0o700 });
      // No free-space floor: only the real ENOSPC (SQLITE_FULL) refuses, the real statfs reports.
      full = await startTestMaster({
        dataDir,
        config: clusterConfig({
          storage: { warn_free_bytes: 0, min_free_bytes: 0, check_interval_ms: 3_600_000 },
        }),
      });
      submitter = await full.mcpClient(full.createToken('sam', ['submitter']));
      reviewer = await full.mcpClient(full.createToken('rex', ['reviewer']));
      fw = await startWorkerOn(full, 'gpu-tmpfs', { simCards: 1 });
      await waitFor(() => full.deps.cluster.fleet.get('gpu-tmpfs').cards.length === 1, { what: 'one card' });
    });

    afterAll(async () => {
      await fw?.close();
      await full?.close({ keepDataDir: true });
      if (tmpfs) execFileSync('umount', [tmpfs]);
    });

    it('refuses the log unacknowledged on ENOSPC and takes it all once the filesystem grows', async () => {
      const t = loudGated('tmpfs', 10, 25_000, 200);
      const id = await approveTask(submitter, reviewer, t.spec);
      await waitFor(async () => (await getTask(submitter, id)).state === 'RUNNING', { what: 'running' });
      writeFileSync(t.gate, '');
      const health = await waitFor(
        async () => {
          const res = await full.rest(null).get<{ storage: { state: string; detail?: string } }>('/healthz');
          return res.status === 503 ? res : null;
        },
        { what: '/healthz 503 once the filesystem is full', timeoutMs: 30_000 },
      );
      expect(health.body.storage).toMatchObject({ state: 'unwritable' });
      expect(health.body.storage.detail).toMatch(/SQLITE_FULL|SQLITE_IOERR/);
      expectError(
        await callTool(submitter, 'create_proposal', { spec: validSpec(), idempotency_key: full.key() }),
        'UNAVAILABLE',
      );
      execFileSync('mount', ['-o', 'remount,size=256m', tmpfs!]);
      await full.master.storage.check();
      const done = await waitUntilSettled(submitter, id, 60_000);
      expect(done).toMatchObject({ state: 'COMPLETED', exit_code: 0 });
      // 25 000 lines of about 215 bytes after the gate (more than the whole filesystem held): all land. A
      // backlog over 1 MiB may land after `exited` (ADR 0022), so wait for it rather than read once.
      const landed = await waitFor(
        async () => {
          const page = expectOk(
            await callTool<{ total_bytes: number }>(submitter, 'get_task_logs', {
              task_id: id,
              max_bytes: 1,
            }),
          );
          return page.total_bytes > 25_000 * 210 ? page.total_bytes : null;
        },
        { what: 'the whole log landed', timeoutMs: 60_000 },
      );
      expect(landed).toBeGreaterThan(25_000 * 210);
      expect(full.store.tasks.inState('RECONCILIATION_REQUIRED')).toEqual([]);
    });
  },
);
