import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startExecution } from '../../../../worker/local/executor.js';
import { resolveRunAs } from '../../../../worker/sandbox/run-as.js';
import { makePlan } from '../../../support/executor-plan.js';
import { isRoot, requireOrSkip } from '../../../support/require-or-skip.js';

const dir = mkdtempSync(join(tmpdir(), 'gpu-broker-run-as-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const passwd = join(dir, 'passwd');
writeFileSync(
  passwd,
  'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n',
);

describe('resolveRunAs', () => {
  it('resolves a user name or UID:GID', () => {
    expect(resolveRunAs('nobody', { passwdPath: passwd, currentUid: 0 })).toEqual({
      name: 'nobody',
      uid: 65534,
      gid: 65534,
    });
    expect(resolveRunAs('1234:99', { passwdPath: passwd, currentUid: 0 })).toMatchObject({
      uid: 1234,
      gid: 99,
    });
  });

  it('refuses what would not isolate anything', () => {
    expect(() => resolveRunAs('nobody', { passwdPath: passwd, currentUid: 1000 })).toThrow(
      /needs the worker to run as root/,
    );
    expect(() => resolveRunAs('root', { passwdPath: passwd, currentUid: 0 })).toThrow(/not root/);
    expect(() => resolveRunAs('ghost', { passwdPath: passwd, currentUid: 0 })).toThrow(/no user "ghost"/);
  });
});

const rootOnly = requireOrSkip('root', isRoot, 'run the tests as root: task uids, chown and setpriv need it');

describe.runIf(rootOnly)('a task run as another user (worker running as root)', () => {
  it('runs as that user and cannot read the worker’s private files', async () => {
    // The executions root's parents must be traversable by the task's user, as on a real worker host.
    const root = join(dir, 'executions');
    chmodSync(dir, 0o711);
    const secret = join(dir, 'worker.token');
    writeFileSync(secret, 'gpb_secret\n', { mode: 0o600 });
    const plan = makePlan({
      executionId: 'exec-ra',
      cards: [{ index: 0, uuid: 'SIM-0' }],
      argv: [
        '/bin/sh',
        '-c',
        `id -u; cat ${secret} || echo DENIED; echo ok > "$GPU_BROKER_OUTPUT_DIR/r.txt"`,
      ],
      outputs: [{ path: 'r.txt', required: true }],
    });
    let out = '';
    const handle = startExecution(plan, {
      rootDir: root,
      workerId: 'w',
      provider: 'sim',
      onLog: (stream, _offset, data) => {
        if (stream === 'stdout') out += data;
      },
      cleanupPollMs: 20,
      runAs: resolveRunAs('65534:65534'),
    });
    const result = await handle.done;
    expect(result).toMatchObject({ exit_code: 0, failure_reason: null, cleaned: true });
    expect(out).toContain('65534');
    expect(out).toContain('DENIED');
    expect(out).not.toContain('gpb_secret');
    expect(result.outputs.map((o) => o.path)).toEqual(['r.txt']);
  });
});
