import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PROTOCOL_VERSION } from '../../../../src/contracts/worker-protocol.js';
import { waitFor } from '../../../support/wait.js';
import { type Harness, harness, plan, simUuid } from './daemon-harness.js';

// Real ws, real child processes, real SQLite files: only the master is a fake.

let h: Harness;
beforeEach(async () => {
  h = await harness();
});
afterEach(async () => {
  await h.dispose();
});

describe('worker daemon: session', () => {
  it('says hello with its cards and sends samples after welcome', { timeout: 3000 }, async () => {
    const worker = await h.worker();
    await waitFor(() => h.master.processed('sample').length >= 2, { timeoutMs: 2500, what: 'two samples' });
    const [hello] = h.master.processed('hello');
    expect(hello).toMatchObject({
      protocol_version: PROTOCOL_VERSION,
      worker_id: 'w1',
      boot_id: worker.bootId,
      provider: 'sim',
      executions: [],
      master_marks: [],
    });
    expect(hello?.cards.map((c) => c.uuid)).toEqual([0, 1, 2, 3].map(simUuid));
    expect(h.master.attempts[0]).toBe(h.master.token);
    const sample = h.master.processed('sample').at(-1)!;
    expect(sample.boot_id).toBe(worker.bootId);
    expect(sample.sampler_error).toBeNull();
    expect(sample.cards).toHaveLength(4);
    expect(sample.cards.every((c) => c.simulated)).toBe(true);
    expect(worker.isConnected()).toBe(true);
  });
});

describe('worker daemon: assign', () => {
  it('runs a plan on two cards and reports every phase, logs and outputs', { timeout: 3000 }, async () => {
    await h.worker();
    await waitFor(() => h.master.connected() && h.master.processed('sample').length > 0);
    const p = plan({
      cards: [1, 3],
      epoch: 4,
      argv: [
        '/bin/sh',
        '-c',
        'echo $CUDA_VISIBLE_DEVICES; echo oops >&2; printf hi > "$GPU_BROKER_OUTPUT_DIR/r.txt"',
      ],
      outputs: [{ path: 'r.txt', required: true }],
    });
    const seq = h.master.assign(p);
    await waitFor(() => h.master.phases(p.execution_id).some((m) => m.phase === 'cleaned'), {
      timeoutMs: 2500,
      what: 'cleaned',
    });

    const phases = h.master.phases(p.execution_id);
    expect(phases.map((m) => m.phase)).toEqual(['accepted', 'started', 'exited', 'cleaned']);
    expect(h.master.replies('ack')).toContainEqual({ type: 'ack', boot_id: h.master.bootId, seq });
    const sha = createHash('sha256').update('hi').digest('hex');
    expect(phases[2]).toMatchObject({
      task_id: p.task_id,
      lease_epoch: 4,
      exit_code: 0,
      signal: null,
      failure_reason: null,
      outputs: [{ path: 'r.txt', size: 2, sha256: sha }],
    });
    expect(phases[3]).toMatchObject({ exit_code: 0, failure_reason: null, outputs: [{ path: 'r.txt' }] });
    expect(phases[3]?.detail).toContain('is gone');
    expect(h.master.logText(p.execution_id)).toBe('1,3\n');
    expect(h.master.logText(p.execution_id, 'stderr')).toBe('oops\n');
    const [output] = h.master.processed('output');
    expect(output).toMatchObject({
      execution_id: p.execution_id,
      lease_epoch: 4,
      path: 'r.txt',
      size: 2,
      sha256: sha,
    });
    expect(Buffer.from(output!.content_base64, 'base64').toString()).toBe('hi');
    // The output arrives before the exit that lists it.
    const order = h.master.received.map((r) => r.message.type);
    expect(order.indexOf('output')).toBeLessThan(
      h.master.received.findIndex((r) => r.message.type === 'execution' && r.message.phase === 'exited'),
    );
    // Each sequenced message arrived once: nothing was resent on a healthy connection.
    expect(h.master.received.filter((r) => r.duplicate)).toEqual([]);
  });

  it('acks a duplicated assign without running it again, and re-reports a re-delivered one', async () => {
    await h.worker();
    await waitFor(() => h.master.connected() && h.master.processed('sample').length > 0);
    const runs = join(h.dir, 'runs');
    const p = plan({ argv: ['/bin/sh', '-c', `echo x >> ${runs}`] });
    const seq = h.master.assign(p);
    h.master.assign(p, seq); // the same message again (a resend)
    await waitFor(() => h.master.phases(p.execution_id).some((m) => m.phase === 'cleaned'), {
      timeoutMs: 2500,
      what: 'cleaned',
    });
    expect(h.master.replies('ack').filter((a) => a.seq === seq)).toHaveLength(2);

    h.master.assign(p); // a new seq, the same execution (e.g. the master re-dispatched it)
    await waitFor(() => h.master.phases(p.execution_id).length === 5, {
      timeoutMs: 2500,
      what: 'the re-report',
    });
    expect(h.master.phases(p.execution_id).map((m) => m.phase)).toEqual([
      'accepted',
      'started',
      'exited',
      'cleaned',
      'cleaned',
    ]);
    expect(h.master.phases(p.execution_id)[4]).toMatchObject({ exit_code: 0, failure_reason: null });
    expect(readFileSync(runs, 'utf8')).toBe('x\n');
  });

  it('rejects a stale epoch with STALE_EPOCH before anything runs', async () => {
    await h.worker();
    await waitFor(() => h.master.connected() && h.master.processed('sample').length > 0);
    const first = plan({ cards: [0, 1], epoch: 5, argv: ['/bin/true'] });
    h.master.assign(first);
    await waitFor(() => h.master.phases(first.execution_id).some((m) => m.phase === 'cleaned'));

    const marker = join(h.dir, 'stale-ran');
    const stale = plan({ cards: [1], epoch: 4, argv: ['/bin/sh', '-c', `touch ${marker}`] });
    h.master.assign(stale);
    await waitFor(() => h.master.phases(stale.execution_id).length > 0);
    const [report] = h.master.phases(stale.execution_id);
    expect(report).toMatchObject({ phase: 'rejected', failure_reason: 'STALE_EPOCH', lease_epoch: 4 });
    expect(report?.detail).toMatch(/card 1 has seen lease epoch 5/);
    expect(existsSync(marker)).toBe(false);
  });

  it('rejects cards that do not exist here or whose uuid differs', async () => {
    await h.worker();
    await waitFor(() => h.master.connected() && h.master.processed('sample').length > 0);
    const missing = plan({ cards: [7], argv: ['/bin/true'] });
    const wrong = { ...plan({ argv: ['/bin/true'] }), cards: [{ index: 0, uuid: 'GPU-someone-else' }] };
    h.master.assign(missing);
    h.master.assign(wrong);
    await waitFor(() => h.master.phases(wrong.execution_id).length > 0);
    expect(h.master.phases(missing.execution_id)[0]).toMatchObject({
      phase: 'rejected',
      failure_reason: 'SETUP_FAILED',
    });
    expect(h.master.phases(missing.execution_id)[0]?.detail).toContain('card 7 does not exist');
    expect(h.master.phases(wrong.execution_id)[0]?.detail).toContain('not GPU-someone-else');
  });
});

describe('worker daemon: cancel, query, bad messages', () => {
  it('cancels a running execution; refuses stale or unknown cancels; answers queries', {
    timeout: 3000,
  }, async () => {
    await h.worker();
    await waitFor(() => h.master.connected() && h.master.processed('sample').length > 0);
    const p = plan({ epoch: 3, argv: ['/bin/sh', '-c', 'echo up; exec sleep 30'] });
    h.master.assign(p);
    await waitFor(() => h.master.logText(p.execution_id) === 'up\n', {
      timeoutMs: 2500,
      what: 'the task to run',
    });

    const stale = h.master.sendSequenced({
      type: 'cancel',
      execution_id: p.execution_id,
      lease_epoch: 2,
      reason: 'x',
    });
    const unknown = h.master.sendSequenced({
      type: 'cancel',
      execution_id: 'nope',
      lease_epoch: 3,
      reason: 'x',
    });
    const query = h.master.sendSequenced({ type: 'query', execution_id: 'nope-either' });
    await waitFor(() => h.master.replies('error').length === 3);
    expect(h.master.replies('error')).toEqual([
      expect.objectContaining({ code: 'STALE_EPOCH', ref_seq: stale }),
      expect.objectContaining({ code: 'UNKNOWN_EXECUTION', ref_seq: unknown }),
      expect.objectContaining({
        code: 'UNKNOWN_EXECUTION',
        ref_seq: query,
        message: expect.stringContaining('nope-either'),
      }),
    ]);
    expect(h.master.phases(p.execution_id).map((m) => m.phase)).toEqual(['accepted', 'started']);

    h.master.sendSequenced({ type: 'query', execution_id: p.execution_id });
    await waitFor(() => h.master.phases(p.execution_id).length === 3);
    expect(h.master.phases(p.execution_id)[2]?.phase).toBe('started');

    h.master.sendSequenced({
      type: 'cancel',
      execution_id: p.execution_id,
      lease_epoch: 3,
      reason: 'user asked',
    });
    await waitFor(() => h.master.phases(p.execution_id).some((m) => m.phase === 'cleaned'), {
      timeoutMs: 2500,
      what: 'cleaned',
    });
    expect(h.master.phases(p.execution_id).find((m) => m.phase === 'exited')).toMatchObject({
      failure_reason: 'CANCELLED',
      signal: 'SIGTERM',
      exit_code: null,
    });
  });

  it('answers garbage with INVALID_MESSAGE and keeps the connection', async () => {
    await h.worker();
    await waitFor(() => h.master.connected() && h.master.processed('sample').length > 0);
    h.master.sendRaw('this is not json');
    h.master.sendRaw(JSON.stringify({ type: 'launch-missiles' }));
    h.master.sendSequenced({ type: 'assign', plan: { execution_id: 'half-a-plan' } }, 41);
    await waitFor(() => h.master.replies('error').length === 3);
    const errors = h.master.replies('error');
    expect(errors.map((e) => e.code)).toEqual(['INVALID_MESSAGE', 'INVALID_MESSAGE', 'INVALID_MESSAGE']);
    expect(errors[2]).toMatchObject({ ref_seq: 41 });
    // A poison sequenced message is acknowledged so the master does not resend it for ever.
    expect(h.master.replies('ack')).toContainEqual({ type: 'ack', boot_id: h.master.bootId, seq: 41 });

    // Still the same session, and it still works.
    const p = plan({ argv: ['/bin/true'] });
    h.master.assign(p);
    await waitFor(() => h.master.phases(p.execution_id).some((m) => m.phase === 'cleaned'));
    expect(h.master.processed('hello')).toHaveLength(1);
    expect(h.master.invalid).toEqual([]);
  });
});
