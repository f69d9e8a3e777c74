import { type ChildProcess, spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { CardSample } from '../../../../src/contracts/sample.js';
import { processIdentity } from '../../../../worker/local/process-group.js';
import type { CardSampler } from '../../../../worker/samplers/card-sampler.js';
import { selectSampler } from '../../../../worker/samplers/select-sampler.js';
import { openLocalStore } from '../../../../worker/store/local-store.js';
import { fakeH100Cards, fakeSmiEnv, writeFakeSmiState } from '../../../fixtures/fake-smi.js';
import { waitFor } from '../../../support/wait.js';
import { seedExecution } from '../../../support/worker-store.js';
import { type Harness, harness, plan } from './daemon-harness.js';

let h: Harness;
const children: ChildProcess[] = [];
beforeEach(async () => {
  h = await harness();
});
afterEach(async () => {
  for (const c of children.splice(0)) if (c.pid !== undefined && c.exitCode === null) killGroup(c.pid);
  await h.dispose();
});

function killGroup(pgid: number): void {
  try {
    process.kill(-pgid, 'SIGKILL');
  } catch {
    // already gone
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('worker daemon: connection loss', () => {
  it('keeps the task running through a cut and delivers every phase exactly once', {
    timeout: 3000,
  }, async () => {
    await h.worker();
    await waitFor(() => h.master.connected() && h.master.processed('sample').length > 0);
    const gate = join(h.dir, 'gate');
    const p = plan({
      argv: ['/bin/sh', '-c', `echo before; while [ ! -f ${gate} ]; do sleep 0.02; done; echo after`],
    });
    h.master.assign(p);
    await waitFor(() => h.master.logText(p.execution_id) === 'before\n', {
      timeoutMs: 2500,
      what: 'the task to run',
    });

    // Messages sent now are lost in flight, then the socket dies: the worker must resend them.
    h.master.blackhole = true;
    writeFileSync(gate, '');
    await waitFor(() => h.master.lost.some((m) => (m as { phase?: string }).phase === 'cleaned'), {
      timeoutMs: 2500,
      what: 'the worker to send cleaned into the void',
    });
    h.master.dropSocket();
    h.master.blackhole = false;

    await waitFor(() => h.master.phases(p.execution_id).some((m) => m.phase === 'cleaned'), {
      timeoutMs: 2500,
      what: 'resent phases',
    });
    expect(h.master.processed('hello')).toHaveLength(2);
    expect(h.master.phases(p.execution_id).map((m) => m.phase)).toEqual([
      'accepted',
      'started',
      'exited',
      'cleaned',
    ]);
    expect(h.master.logText(p.execution_id)).toBe('before\nafter\n');
    expect(h.master.phases(p.execution_id)[2]).toMatchObject({ exit_code: 0, failure_reason: null });
  });

  it('queues while the master refuses connections and resends in order afterwards', {
    timeout: 3000,
  }, async () => {
    await h.worker();
    await waitFor(() => h.master.connected() && h.master.processed('sample').length > 0);
    const gate = join(h.dir, 'gate');
    const p = plan({ argv: ['/bin/sh', '-c', `while [ ! -f ${gate} ]; do sleep 0.02; done; echo done`] });
    h.master.assign(p);
    await waitFor(() => h.master.phases(p.execution_id).some((m) => m.phase === 'started'));

    h.master.autoAck = false; // the last messages before the cut stay unacknowledged
    h.master.refuseWith = 503;
    h.master.dropSocket();
    writeFileSync(gate, '');
    const attemptsBefore = h.master.attempts.length;
    await waitFor(() => h.master.attempts.length >= attemptsBefore + 2, {
      timeoutMs: 2500,
      what: 'reconnect attempts',
    });
    h.master.autoAck = true;
    h.master.refuseWith = null;

    await waitFor(() => h.master.phases(p.execution_id).some((m) => m.phase === 'cleaned'), {
      timeoutMs: 2500,
      what: 'cleaned',
    });
    expect(h.master.phases(p.execution_id).map((m) => m.phase)).toEqual([
      'accepted',
      'started',
      'exited',
      'cleaned',
    ]);
    expect(h.master.logText(p.execution_id)).toBe('done\n');
    // Only the newest sample of the outage is replayed.
    const afterCut = h.master.received.slice(
      h.master.received.findLastIndex((r) => r.message.type === 'hello'),
    );
    expect(afterCut.filter((r) => r.message.type === 'sample' && !r.duplicate).length).toBeLessThanOrEqual(2);
  });
});

describe('worker daemon: sampling', () => {
  it('reports sampler_error while nvidia-smi fails and recovers when it works', {
    timeout: 3000,
  }, async () => {
    const state = { cards: fakeH100Cards(2) };
    const statePath = await writeFakeSmiState(h.dir, {
      ...state,
      faults: [{ action: 'fail', stderr: 'NVML gone' }],
    });
    const choice = await selectSampler({ gpus: 'nvidia', env: { ...process.env, ...fakeSmiEnv(statePath) } });
    await h.worker({ sampler: choice.sampler });
    await waitFor(() => h.master.processed('sample').some((s) => s.sampler_error !== null), {
      timeoutMs: 2500,
      what: 'an error sample',
    });
    const bad = h.master.processed('sample').find((s) => s.sampler_error !== null)!;
    expect(bad.cards).toEqual([]);
    expect(bad.sampler_error).toMatch(/NVML gone|exit/);

    await writeFakeSmiState(h.dir, state);
    await waitFor(() => h.master.processed('sample').at(-1)?.cards.length === 2, {
      timeoutMs: 2500,
      what: 'a good sample',
    });
    expect(h.master.processed('sample').at(-1)?.sampler_error).toBeNull();
  });

  it('never stacks samples on a hanging sampler and reports it as an error', { timeout: 3000 }, async () => {
    let calls = 0;
    const hanging: CardSampler = {
      provider: 'sim',
      sample: () => {
        calls += 1;
        return new Promise<CardSample[]>(() => undefined);
      },
    };
    await h.worker({ sampler: hanging, firstSampleWaitMs: 50 });
    await waitFor(() => h.master.processed('sample').some((s) => s.sampler_error !== null), {
      timeoutMs: 2500,
      what: 'a stall report',
    });
    expect(h.master.processed('sample').at(-1)?.sampler_error).toMatch(/has not answered/);
    expect(calls).toBe(1);
    expect(h.master.processed('hello')[0]?.cards).toEqual([]);
  });
});

describe('worker daemon: restarts and stops', () => {
  it('reports executions left by a previous process as WORKER_LOST and stops their group', {
    timeout: 3000,
  }, async () => {
    const dataDir = join(h.dir, 'data');
    mkdirSync(dataDir, { recursive: true });
    const ours = plan({ argv: ['/bin/sleep', '30'] });
    const neverStarted = plan({ argv: ['/bin/true'], cards: [1] });
    const foreign = plan({ argv: ['/bin/sleep', '30'], cards: [2] });
    // A task group the previous worker spawned (it carries the execution id), and an unrelated group
    // that happens to have a recorded pgid (pid reuse): only the first may be signalled.
    const task = spawn('/bin/sleep', ['30'], {
      detached: true,
      stdio: 'ignore',
      env: { GPU_BROKER_EXECUTION_ID: ours.execution_id },
    });
    const stranger = spawn('/bin/sleep', ['30'], { detached: true, stdio: 'ignore', env: {} });
    children.push(task, stranger);
    const store = openLocalStore(join(dataDir, 'worker.sqlite'));
    seedExecution(store, ours, 'started');
    store.setExecutionPgid(ours.execution_id, task.pid!);
    seedExecution(store, neverStarted, 'accepted');
    seedExecution(store, foreign, 'started');
    store.setExecutionPgid(foreign.execution_id, stranger.pid!);
    store.raiseMasterMark('old-master-boot', 7);
    store.close();

    await h.worker();
    await waitFor(
      () => [ours, neverStarted, foreign].every((p) => h.master.phases(p.execution_id).length === 2),
      { timeoutMs: 2500, what: 'lost executions accounted for' },
    );
    const [hello] = h.master.processed('hello');
    expect(hello?.master_marks).toEqual([{ boot_id: 'old-master-boot', seq: 7 }]);
    expect(hello?.executions.map((e) => e.execution_id).sort()).toEqual(
      [ours, neverStarted, foreign].map((p) => p.execution_id).sort(),
    );
    for (const p of [ours, neverStarted, foreign]) {
      const [exited, cleaned] = h.master.phases(p.execution_id);
      expect(exited).toMatchObject({
        phase: 'exited',
        failure_reason: 'WORKER_LOST',
        detail: 'worker restarted',
      });
      expect(cleaned).toMatchObject({ phase: 'cleaned', failure_reason: 'WORKER_LOST' });
    }
    expect(alive(task.pid!)).toBe(false);
    expect(alive(stranger.pid!)).toBe(true);

    // Never run again: a re-delivered assign only gets the latest phase back.
    h.master.assign(ours);
    await waitFor(() => h.master.phases(ours.execution_id).length === 3);
    expect(h.master.phases(ours.execution_id)[2]?.phase).toBe('cleaned');
  });

  it('recognises a lost group by its leader (start time, boot), not by an environment the task controls', {
    timeout: 4000,
  }, async () => {
    // An unsandboxed task that hid its environment (`exec env -i …`): no execution id in any member.
    const dataDir = join(h.dir, 'data');
    mkdirSync(dataDir, { recursive: true });
    const hidden = plan({ argv: ['/bin/sleep', '30'] });
    const reused = plan({ argv: ['/bin/sleep', '30'], cards: [1] });
    const otherBoot = plan({ argv: ['/bin/sleep', '30'], cards: [2] });
    const task = spawn('/bin/sleep', ['30'], { detached: true, stdio: 'ignore', env: {} });
    // Groups whose recorded leader is not the process that now has the pid: another start time, or
    // another boot. Neither may be signalled.
    const strangerA = spawn('/bin/sleep', ['30'], { detached: true, stdio: 'ignore', env: {} });
    const strangerB = spawn('/bin/sleep', ['30'], { detached: true, stdio: 'ignore', env: {} });
    children.push(task, strangerA, strangerB);
    const store = openLocalStore(join(dataDir, 'worker.sqlite'));
    seedExecution(store, hidden, 'started');
    store.setExecutionPgid(hidden.execution_id, task.pid!, processIdentity(task.pid!));
    seedExecution(store, reused, 'started');
    store.setExecutionPgid(reused.execution_id, strangerA.pid!, {
      ...processIdentity(strangerA.pid!)!,
      start: '1',
    });
    seedExecution(store, otherBoot, 'started');
    store.setExecutionPgid(otherBoot.execution_id, strangerB.pid!, {
      ...processIdentity(strangerB.pid!)!,
      boot: '00000000-0000-0000-0000-000000000000',
    });
    store.close();

    await h.worker();
    await waitFor(
      () => [hidden, reused, otherBoot].every((p) => h.master.phases(p.execution_id).length === 2),
      { timeoutMs: 3000, what: 'lost executions accounted for' },
    );
    for (const p of [hidden, reused, otherBoot])
      expect(h.master.phases(p.execution_id)[1]).toMatchObject({
        phase: 'cleaned',
        failure_reason: 'WORKER_LOST',
      });
    expect(alive(task.pid!)).toBe(false);
    expect(alive(strangerA.pid!)).toBe(true);
    expect(alive(strangerB.pid!)).toBe(true);
  });

  it('cancels running executions on a clean stop and reports them', { timeout: 3000 }, async () => {
    const worker = await h.worker();
    await waitFor(() => h.master.connected() && h.master.processed('sample').length > 0);
    const p = plan({ argv: ['/bin/sh', '-c', 'echo up; exec sleep 30'] });
    h.master.assign(p);
    await waitFor(() => h.master.logText(p.execution_id) === 'up\n');
    const pgid = h.master.phases(p.execution_id).length; // started was reported
    expect(pgid).toBe(2);

    await worker.close();
    expect(h.master.phases(p.execution_id).map((m) => m.phase)).toEqual([
      'accepted',
      'started',
      'exited',
      'cleaned',
    ]);
    expect(h.master.phases(p.execution_id)[2]).toMatchObject({
      failure_reason: 'WORKER_LOST',
      signal: 'SIGTERM',
    });
    expect(h.master.phases(p.execution_id)[2]?.detail).toContain('worker stopped');
    expect(worker.isConnected()).toBe(false);
    // The started group was recorded with its leader's identity (for a later worker's recovery).
    const store = openLocalStore(join(h.dir, 'data', 'worker.sqlite'));
    try {
      expect(store.getExecution(p.execution_id)?.pgid_identity).toMatchObject({
        start: expect.stringMatching(/^\d+$/),
        boot: readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim(),
      });
    } finally {
      store.close();
    }
  });
});

describe('worker daemon: a master message that fails unexpectedly', () => {
  it('drops the session so no later message overtakes it; the resend is then processed', async () => {
    const { ExecutionManager } = await import('../../../../worker/executions/manager.js');
    const original = ExecutionManager.prototype.handleQuery;
    let failures = 0;
    ExecutionManager.prototype.handleQuery = function (this: InstanceType<typeof ExecutionManager>, msg) {
      if (msg.execution_id === 'exec-poisoned' && failures++ === 0) throw new Error('injected fault');
      return original.call(this, msg);
    };
    try {
      await h.worker();
      await waitFor(() => h.master.connected() && h.master.processed('hello').length === 1, {
        timeoutMs: 2500,
        what: 'first hello',
      });
      h.master.sendSequenced({ type: 'query', execution_id: 'exec-poisoned' }, 5);
      // Already in flight behind it: must not be processed on the doomed session.
      h.master.sendSequenced({ type: 'query', execution_id: 'exec-later' }, 6);
      await waitFor(() => h.master.replies('error').some((e) => e.code === 'INTERNAL' && e.ref_seq === 5), {
        timeoutMs: 2500,
        what: 'INTERNAL error',
      });
      await waitFor(() => h.master.processed('hello').length >= 2, { timeoutMs: 5000, what: 'reconnect' });
      const hello = h.master.processed('hello').at(-1)!;
      const mark = hello.master_marks.find((m) => m.boot_id === h.master.bootId)?.seq ?? 0;
      expect(mark).toBeLessThan(5);
      expect(h.master.replies('ack').some((a) => a.seq === 6)).toBe(false);

      // The master resends both in order on the new session; now both are processed and acknowledged.
      h.master.sendSequenced({ type: 'query', execution_id: 'exec-poisoned' }, 5);
      h.master.sendSequenced({ type: 'query', execution_id: 'exec-later' }, 6);
      await waitFor(() => [5, 6].every((s) => h.master.replies('ack').some((a) => a.seq === s)), {
        timeoutMs: 2500,
        what: 'acks of 5 and 6',
      });
      expect(
        h.master
          .replies('error')
          .filter((e) => e.code === 'UNKNOWN_EXECUTION')
          .map((e) => e.ref_seq),
      ).toEqual([5, 6]);
    } finally {
      ExecutionManager.prototype.handleQuery = original;
    }
  });
});
