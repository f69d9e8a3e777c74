import { createHash } from 'node:crypto';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enqueueForWorker } from '../../../src/broker/workers/link.js';
import { type ExecutionPlan, PROTOCOL_VERSION } from '../../../src/contracts/worker-protocol.js';
import { openLocalStore } from '../../../worker/store/local-store.js';
import {
  approveTask,
  clusterConfig,
  executionDetail,
  getTask,
  type LeaseWatch,
  shellSpec,
  waitUntilSettled,
  watchLeaseCards,
} from '../../support/cluster.js';
import { startTestMaster, type TestMaster } from '../../support/master.js';
import { callTool, expectOk } from '../../support/mcp.js';
import { connectRawWorker, type RawWorker } from '../../support/raw-worker.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';
import { waitFor } from '../../support/wait.js';
import { startWorkerOn, type TestWorker, workerStorePath } from '../../support/worker.js';

/**
 * The worker protocol's delivery guarantees against a real master: a sequenced message is applied once
 * however often it arrives (duplicates and old sequence numbers are acknowledged and dropped, even when
 * their content differs), reports replayed under new sequence numbers do not move anything backwards,
 * a re-delivered assign is never run twice, and an assign below a card's epoch mark is refused by the
 * real worker with STALE_EPOCH.
 */

let m: TestMaster;
let alice: Client;
let rita: Client;
let watch: LeaseWatch;
const closers: Array<() => Promise<void>> = [];

beforeAll(async () => {
  m = await startTestMaster({ config: clusterConfig() });
  watch = watchLeaseCards(m.store, m.deps.notifier);
  alice = await m.mcpClient(m.createToken('alice', ['submitter']));
  rita = await m.mcpClient(m.createToken('rita', ['reviewer']));
});

afterAll(async () => {
  watch?.stop();
  for (const close of closers.reverse()) await close();
  await m?.close();
  removeTempDirs();
});

function sha256(data: string): string {
  return createHash('sha256').update(data).digest('hex');
}

function taskActions(taskId: string): string[] {
  return m.store.audit.forSubject('task', taskId).map((e) => e.action);
}

describe('duplicated and replayed worker messages (raw ws worker)', () => {
  let raw: RawWorker;
  let seq = 0;
  /** The first test's sample pump (a real worker's periodic samples). */
  let pump: NodeJS.Timeout | undefined;

  /** Sends under a fresh seq and returns it. */
  const send = (message: Record<string, unknown>): number => {
    const s = ++seq;
    raw.sendSeq(s, message);
    return s;
  };
  const acked = (s: number, times = 1) =>
    waitFor(() => raw.received.filter((r) => r['type'] === 'ack' && r['seq'] === s).length >= times, {
      what: `ack of seq ${s} ×${times}`,
    });

  it('applies each sequenced message once, whatever arrives again', async () => {
    raw = await connectRawWorker({
      url: m.url,
      caPem: m.caPem,
      token: m.createToken('worker-raw', ['worker'], 'raw-1'),
      workerId: 'raw-1',
    });
    closers.push(() => raw.close());
    expect(await raw.hello(2)).toMatchObject({ type: 'welcome', worker_id: 'raw-1', worker_marks: [] });
    // Keep the cards fresh, as a real worker would.
    pump = setInterval(() => {
      raw.sample(++seq, 2);
    }, 100);
    closers.push(async () => clearInterval(pump));

    const content = '{"ok":true}';
    const taskId = await approveTask(
      alice,
      rita,
      shellSpec('true', { worker: 'raw-1', outputs: [{ path: 'result.json', required: true }] }),
    );
    const assign = await raw.next((r) => r['type'] === 'assign', { what: 'assign' });
    raw.send({ type: 'ack', boot_id: assign['boot_id'], seq: assign['seq'] });
    const plan = assign['plan'] as { execution_id: string; lease_epoch: number; task_id: string };
    expect(plan.task_id).toBe(taskId);
    const report = (phase: string, extra: Record<string, unknown> = {}) => ({
      type: 'execution',
      execution_id: plan.execution_id,
      task_id: taskId,
      lease_epoch: plan.lease_epoch,
      phase,
      ...extra,
    });
    const log = (offset: number, data: string) => ({
      type: 'log',
      execution_id: plan.execution_id,
      stream: 'stdout',
      offset,
      data,
    });

    const accepted = send(report('accepted'));
    send(report('started'));
    // The same log message twice, the same seq with other content, and an old seq: one chunk stored.
    const first = send(log(0, 'hello\n'));
    raw.sendSeq(first, log(0, 'hello\n'));
    raw.sendSeq(first, log(6, 'EVIL\n'));
    raw.sendSeq(accepted, log(6, 'OLD\n'));
    const output = send({
      type: 'output',
      execution_id: plan.execution_id,
      lease_epoch: plan.lease_epoch,
      path: 'result.json',
      size: content.length,
      sha256: sha256(content),
      content_base64: Buffer.from(content).toString('base64'),
    });
    raw.sendSeq(output, {
      type: 'output',
      execution_id: plan.execution_id,
      lease_epoch: plan.lease_epoch,
      path: 'result.json',
      size: 4,
      sha256: sha256('evil'),
      content_base64: Buffer.from('evil').toString('base64'),
    });
    const exitedOutputs = [{ path: 'result.json', size: content.length, sha256: sha256(content) }];
    const exited = send(report('exited', { exit_code: 0, outputs: exitedOutputs }));
    raw.sendSeq(exited, report('exited', { exit_code: 3, failure_reason: 'EXIT_NONZERO', outputs: [] }));
    // An old report replayed under a new seq is processed, and changes nothing: phases only move forward.
    const replayed = send(report('started'));
    await acked(replayed);
    expect((await getTask(alice, taskId)).state).toBe('FINALIZING');

    const cleaned = send(report('cleaned', { exit_code: 0, outputs: exitedOutputs }));
    raw.sendSeq(cleaned, report('cleaned', { exit_code: 0, outputs: exitedOutputs }));
    const done = await waitUntilSettled(alice, taskId);
    expect(done).toMatchObject({ state: 'COMPLETED', exit_code: 0, failure_reason: null });

    // Every copy was acknowledged (so a worker would stop resending), and nothing applied twice.
    await acked(first, 3);
    await acked(accepted, 2);
    await acked(output, 2);
    await acked(exited, 2);
    await acked(cleaned, 2);
    expect(raw.received.filter((r) => r['type'] === 'error')).toEqual([]);
    expect(taskActions(taskId)).toEqual([
      'task.created',
      'task.lease_granted',
      'task.started',
      'task.exited',
      'task.cleaned_success',
    ]);
    const logs = expectOk(
      await callTool<{ data: string; total_bytes: number }>(alice, 'get_task_logs', { task_id: taskId }),
    );
    expect(logs).toMatchObject({ data: 'hello\n', total_bytes: 6 });
    const file = expectOk(
      await callTool<{ file: { content: string } }>(alice, 'get_task_outputs', {
        task_id: taskId,
        path: 'result.json',
      }),
    );
    expect(file.file.content).toBe(content);
    expect(m.store.workers.mark('raw-1', raw.bootId)).toBeGreaterThanOrEqual(cleaned);
    expect(m.store.leases.latestLeaseForTask(taskId)?.state).toBe('RELEASED');
  });

  it('answers a message it cannot parse with an error and keeps the session', async () => {
    // Stop the periodic samples first: one landing after the probe below would reset sampler_error
    // (this race made the test fail now and then under load).
    clearInterval(pump);
    const from = raw.received.length;
    raw.send({ type: 'no-such-type', seq: 1 });
    const error = await raw.next((r) => r['type'] === 'error', { from, what: 'error reply' });
    expect(error).toMatchObject({ code: 'INVALID_MESSAGE' });
    const s = send({ type: 'sample', sampled_at: Date.now(), cards: [], sampler_error: 'probe' });
    await acked(s);
    expect(m.deps.cluster.fleet.get('raw-1').sampler_error).toBe('probe');
  });
});

describe('messages the master cannot take (raw ws worker)', () => {
  it('refuses a message nested 200,000 levels deep with a typed error, and keeps the session', async () => {
    const raw = await connectRawWorker({
      url: m.url,
      caPem: m.caPem,
      token: m.createToken('worker-deep', ['worker'], 'raw-deep'),
      workerId: 'raw-deep',
    });
    closers.push(() => raw.close());
    await raw.hello(1);
    const from = raw.received.length;
    const deep = `${'['.repeat(200_000)}${']'.repeat(200_000)}`;
    raw.sendText(
      `{"type":"sample","protocol_version":${PROTOCOL_VERSION},"boot_id":"${raw.bootId}","seq":3,"sampled_at":1,"cards":${deep},"sampler_error":null}`,
    );
    const error = await raw.next((r) => r['type'] === 'error', { from, what: 'error reply' });
    expect(error).toMatchObject({ code: 'INVALID_MESSAGE', ref_seq: 3 });
    expect(String(error['message'])).toMatch(/nested more than 64 levels/);
    expect(raw.isOpen()).toBe(true);
  });

  it('acknowledges a sequenced message that can never parse, so it is not resent for ever', async () => {
    const raw = await connectRawWorker({
      url: m.url,
      caPem: m.caPem,
      token: m.createToken('worker-poison', ['worker'], 'raw-poison'),
      workerId: 'raw-poison',
    });
    closers.push(() => raw.close());
    await raw.hello(1);
    const from = raw.received.length;
    raw.sendSeq(7, { type: 'sample', sampled_at: Date.now(), cards: 'not a list', sampler_error: null });
    const error = await raw.next((r) => r['type'] === 'error', { from, what: 'error reply' });
    expect(error).toMatchObject({ code: 'INVALID_MESSAGE', ref_seq: 7 });
    await raw.next((r) => r['type'] === 'ack' && r['seq'] === 7, { from, what: 'ack of the poison message' });
    expect(m.store.workers.mark('raw-poison', raw.bootId)).toBe(7);
    expect(raw.isOpen()).toBe(true);
  });

  it('an assign the worker cannot read (an older worker than the plan) fails its task SETUP_FAILED saying why, instead of leaving it ASSIGNED for ever', async () => {
    const raw = await connectRawWorker({
      url: m.url,
      caPem: m.caPem,
      token: m.createToken('worker-old', ['worker'], 'raw-old'),
      workerId: 'raw-old',
    });
    closers.push(() => raw.close());
    await raw.hello(1);
    let seq = 1;
    const pump = setInterval(() => raw.sample(++seq, 1), 100);
    closers.push(async () => clearInterval(pump));
    const taskId = await approveTask(alice, rita, shellSpec('true', { worker: 'raw-old' }));
    const assign = await raw.next((r) => r['type'] === 'assign', { what: 'assign' });
    // What an older worker answers a plan it cannot parse: error naming the seq, then ack.
    raw.send({
      type: 'error',
      code: 'INVALID_MESSAGE',
      message: 'plan.spec: Unrecognized key: "preemptible"',
      ref_seq: assign['seq'],
    });
    raw.send({ type: 'ack', boot_id: assign['boot_id'], seq: assign['seq'] });
    const settled = await waitUntilSettled(alice, taskId, 10_000);
    expect(settled).toMatchObject({ state: 'FAILED', failure_reason: 'SETUP_FAILED' });
    expect(executionDetail(m, taskId)).toMatch(
      /could not read the plan .*Unrecognized key.*upgrade the worker/,
    );
    // Its card is free again (nothing ran).
    expect(m.store.leases.liveCards().filter((c) => c.worker_id === 'raw-old')).toEqual([]);
    // An error naming a seq that is not an unaccepted assign changes nothing (a sample's seq, an unknown one).
    const before = m.store.audit.forSubject('task', taskId).length;
    raw.send({ type: 'error', code: 'INVALID_MESSAGE', message: 'x', ref_seq: Number(assign['seq']) });
    raw.send({ type: 'error', code: 'INVALID_MESSAGE', message: 'x', ref_seq: 99_999 });
    raw.send({ type: 'error', code: 'STALE_EPOCH', message: 'x', ref_seq: Number(assign['seq']) });
    // A sample after them is acknowledged once they were all handled (the session reads in order).
    const after = ++seq;
    raw.sample(after, 1);
    await raw.next((r) => r['type'] === 'ack' && r['seq'] === after, {
      what: 'the later sample acknowledged',
    });
    expect(m.store.audit.forSubject('task', taskId).length).toBe(before);
    expect(raw.isOpen()).toBe(true);
  });

  it('drops the session on an unexpected failure; the resent message is then applied, not lost', async () => {
    const token = m.createToken('worker-flaky', ['worker'], 'raw-flaky');
    const first = await connectRawWorker({ url: m.url, caPem: m.caPem, token, workerId: 'raw-flaky' });
    closers.push(() => first.close());
    await first.hello(1);
    const fleet = m.deps.cluster.fleet;
    const sampled = fleet.sampled.bind(fleet);
    let failures = 0;
    fleet.sampled = (...args: Parameters<typeof sampled>) => {
      if (args[2] === 'after-failure' && failures++ === 0) throw new Error('injected fault');
      return sampled(...args);
    };
    try {
      const from = first.received.length;
      first.sendSeq(3, { type: 'sample', sampled_at: Date.now(), cards: [], sampler_error: 'after-failure' });
      // A later message on the same socket must not raise the mark past the failed one.
      first.sendSeq(4, { type: 'sample', sampled_at: Date.now(), cards: [], sampler_error: 'later' });
      await first.next((r) => r['type'] === 'error' && r['code'] === 'INTERNAL', { from, what: 'INTERNAL' });
      await waitFor(() => !first.isOpen(), { what: 'the master to drop the session' });
      expect(m.store.workers.mark('raw-flaky', first.bootId)).toBeLessThan(3);

      // The worker reconnects under the same boot and resends what was not acknowledged.
      const again = await connectRawWorker({
        url: m.url,
        caPem: m.caPem,
        token,
        workerId: 'raw-flaky',
        bootId: first.bootId,
      });
      closers.push(() => again.close());
      await again.hello(1);
      const at = again.received.length;
      again.sendSeq(3, { type: 'sample', sampled_at: Date.now(), cards: [], sampler_error: 'after-failure' });
      await again.next((r) => r['type'] === 'ack' && r['seq'] === 3, {
        from: at,
        what: 'ack of the resent seq 3',
      });
      expect(fleet.get('raw-flaky').sampler_error).toBe('after-failure');
      expect(m.store.workers.mark('raw-flaky', first.bootId)).toBe(3);
    } finally {
      fleet.sampled = sampled;
    }
  });

  it('closes the session of a worker whose token is revoked', async () => {
    const raw = await connectRawWorker({
      url: m.url,
      caPem: m.caPem,
      token: m.createToken('worker-revoked', ['worker'], 'raw-revoked'),
      workerId: 'raw-revoked',
    });
    closers.push(() => raw.close());
    await raw.hello(1);
    m.revokeToken('worker-revoked');
    await waitFor(() => raw.closeCode() !== null, {
      what: 'the session of the revoked token to close',
      timeoutMs: 15_000,
    });
    expect(raw.closeCode()).toBe(4001);
  });
});

describe('the real worker against re-delivery and stale epochs', () => {
  it('does not run a re-delivered assign again; it reports the phase it already reached', async () => {
    const w: TestWorker = await startWorkerOn(m, 'gpu-replay', { simCards: 1 });
    closers.push(() => w.close());
    const taskId = await approveTask(alice, rita, shellSpec('echo ran', { worker: 'gpu-replay' }));
    expect((await waitUntilSettled(alice, taskId)).state).toBe('COMPLETED');
    const before = taskActions(taskId);
    const markBefore = m.store.workers.mark('gpu-replay', w.worker.bootId);

    const row = m.store.db
      .prepare('SELECT body FROM master_outbox WHERE worker_id = ? AND body LIKE \'%"assign"%\'')
      .get('gpu-replay') as { body: string };
    const { plan } = JSON.parse(row.body) as { plan: ExecutionPlan };
    const seq = m.store.transaction(() =>
      enqueueForWorker(m.deps, m.deps.cluster.link, 'gpu-replay', { type: 'assign', plan }),
    );
    await waitFor(() => m.store.outbox.unacked('gpu-replay').every((e) => e.seq !== seq), {
      what: 'the replayed assign acknowledged',
    });
    // The worker answered with a fresh report of the phase it had reached.
    await waitFor(() => m.store.workers.mark('gpu-replay', w.worker.bootId) > markBefore, {
      what: 'a report about the replayed assign',
    });
    expect(taskActions(taskId)).toEqual(before);
    const logs = expectOk(await callTool<{ data: string }>(alice, 'get_task_logs', { task_id: taskId }));
    expect(logs.data).toBe('ran\n');
    expect((await getTask(alice, taskId)).state).toBe('COMPLETED');
  });

  it('numbers new messages above every seq it used, even after acknowledged rows were pruned', async () => {
    const w = await startWorkerOn(m, 'gpu-prune', { simCards: 1 });
    closers.push(() => w.close());
    const first = await approveTask(alice, rita, shellSpec('echo one', { worker: 'gpu-prune' }));
    expect((await waitUntilSettled(alice, first)).state).toBe('COMPLETED');
    // Retention deletes every acknowledged outbox row (as a day-old prune would).
    await waitFor(() => m.store.outbox.unacked('gpu-prune').length === 0, { what: 'every message acked' });
    m.store.outbox.prune(Date.now() + 1);
    // The worker already processed seqs of this master boot: a reused seq would be dropped as a duplicate.
    const second = await approveTask(alice, rita, shellSpec('echo two', { worker: 'gpu-prune' }));
    expect((await waitUntilSettled(alice, second, 15_000)).state).toBe('COMPLETED');
  });

  it('a worker that saw a higher epoch than this master issued: the master learns it at hello and grants above it', async () => {
    // The worker once saw lease epoch 7 on card 0 (e.g. from a master later restored from an old backup).
    // It used to refuse the restored master's epoch-1 assign (STALE_EPOCH); now hello carries its marks
    // (docs/state-machines.md) and the master's next epoch on that card is 8.
    const dataDir = makeTempDir('worker-stale');
    const local = openLocalStore(workerStorePath(dataDir));
    expect(local.checkAndRaiseEpoch([0], 7)).toEqual({ ok: true });
    local.close();
    const w = await startWorkerOn(m, 'gpu-stale', { simCards: 1, dataDir });
    closers.push(() => w.close());

    const taskId = await approveTask(alice, rita, shellSpec('echo ran', { worker: 'gpu-stale' }));
    const done = await waitUntilSettled(alice, taskId);
    expect(done).toMatchObject({ state: 'COMPLETED', lease_epoch: 8 });
    expect(m.store.leases.latestLeaseForTask(taskId)).toMatchObject({ state: 'RELEASED', lease_epoch: 8 });
    expect(watch.violations).toEqual([]);
  });
});

describe('a card gone from under a running task (raw ws worker)', () => {
  it('raises leased_card_missing while the task runs on a card its worker no longer lists (a MIG layout changed, a card off the bus)', async () => {
    const raw = await connectRawWorker({
      url: m.url,
      caPem: m.caPem,
      token: m.createToken('worker-gone', ['worker'], 'raw-gone'),
      workerId: 'raw-gone',
    });
    closers.push(() => raw.close());
    await raw.hello(2);
    let seq = 1;
    let cards: readonly (typeof raw.simCards)[number][] = raw.simCards.slice(0, 2);
    const pump = setInterval(
      () => raw.sendSeq(++seq, { type: 'sample', sampled_at: Date.now(), cards, sampler_error: null }),
      100,
    );
    closers.push(async () => clearInterval(pump));
    const taskId = await approveTask(alice, rita, shellSpec('sleep 60', { worker: 'raw-gone' }));
    const assign = await raw.next((r) => r['type'] === 'assign', { what: 'assign' });
    raw.send({ type: 'ack', boot_id: assign['boot_id'], seq: assign['seq'] });
    const plan = assign['plan'] as {
      execution_id: string;
      lease_epoch: number;
      cards: Array<{ index: number }>;
    };
    const report = (phase: string) => ({
      type: 'execution',
      execution_id: plan.execution_id,
      task_id: taskId,
      lease_epoch: plan.lease_epoch,
      phase,
    });
    raw.sendSeq(++seq, report('accepted'));
    raw.sendSeq(++seq, report('started'));
    await waitFor(async () => ((await getTask(alice, taskId)).state === 'RUNNING' ? true : null), {
      what: 'the task running',
    });
    const ops = await m.mcpClient(m.operatorToken);
    type Alert = { kind: string; subject: string; message: string };
    const alerts = async () =>
      expectOk(await callTool<{ alerts: Alert[] }>(ops, 'get_status', {})).alerts.filter(
        (a) => a.kind === 'leased_card_missing',
      );
    expect(await alerts()).toEqual([]);
    // The leased card leaves the worker's samples (its other card stays).
    const held = plan.cards[0]!.index;
    cards = raw.simCards.slice(0, 2).filter((c) => c.index !== held);
    const raised = await waitFor(
      async () => {
        const found = await alerts();
        return found.length > 0 ? found : null;
      },
      { what: 'leased_card_missing' },
    );
    expect(raised[0]).toMatchObject({ subject: `raw-gone:${held}` });
    expect(raised[0]!.message).toContain(taskId);
    // Back in the samples: no alert.
    cards = raw.simCards.slice(0, 2);
    await waitFor(async () => ((await alerts()).length === 0 ? true : null), { what: 'the alert gone' });
    expectOk(await callTool(alice, 'cancel_task', { task_id: taskId, idempotency_key: `c-${taskId}` }));
  });
});
