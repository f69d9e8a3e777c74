import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { ExecutionPlan } from '../../../../src/contracts/worker-protocol.js';
import { type ExecutorOptions, startExecution } from '../../../../worker/local/executor.js';
import { resolveRunAs } from '../../../../worker/sandbox/run-as.js';
import { InputCache } from '../../../../worker/task-io/input-cache.js';
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

/** Starts `plan` unsandboxed as nobody (the worker is root); its stdout as it came. */
function runAsNobody(plan: ExecutionPlan, rootDir: string, extra: Partial<ExecutorOptions> = {}) {
  let out = '';
  const handle = startExecution(plan, {
    rootDir,
    workerId: 'w',
    provider: 'sim',
    onLog: (stream, _offset, data) => {
      if (stream === 'stdout') out += data;
    },
    cleanupPollMs: 20,
    runAs: resolveRunAs('65534:65534'),
    ...extra,
  });
  return { handle, stdout: () => out };
}

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
    const run = runAsNobody(plan, root);
    const result = await run.handle.done;
    const out = run.stdout();
    expect(result).toMatchObject({ exit_code: 0, failure_reason: null, cleaned: true });
    expect(out).toContain('65534');
    expect(out).toContain('DENIED');
    expect(out).not.toContain('gpb_secret');
    expect(result.outputs.map((o) => o.path)).toEqual(['r.txt']);
  });

  it('places the inputs before the task dir is its user’s: another process of that uid cannot plant a link for them', async () => {
    // Unsandboxed tasks all run as the one run-as uid, and their inputs land in the task dir itself. The
    // worker (root) must finish writing there before any process of that uid can, or a neighbour task
    // could put `a -> /somewhere` in the fresh dir and have root write the input through it.
    const root = join(dir, 'executions-inputs');
    chmodSync(dir, 0o711);
    const outside = join(dir, 'outside');
    mkdirSync(outside, { mode: 0o777 });
    chmodSync(outside, 0o777);
    const content = Buffer.from('print("reviewed")\n');
    const sha256 = createHash('sha256').update(content).digest('hex');
    const base = makePlan({
      executionId: 'exec-ra-inputs',
      cards: [{ index: 0, uuid: 'SIM-0' }],
      argv: ['/bin/sh', '-c', 'cat a/train.py; id -u'],
    });
    const plan = {
      ...base,
      spec: { ...base.spec, inputs: [{ path: 'a/train.py', sha256, size: content.length }] },
    };
    const taskDir = join(root, plan.execution_id, 'task');
    const during: { owner?: number; planted?: number | null } = {};
    const run = runAsNobody(plan, root, {
      inputs: {
        cache: new InputCache(join(dir, 'input-cache'), 1 << 20),
        fetch: async (_execution, _digest, _max, into) => {
          // While the input is on its way: whose is the dir, and can the task's uid plant a link in it?
          during.owner = statSync(taskDir).uid;
          during.planted = spawnSync('ln', ['-s', outside, join(taskDir, 'a')], {
            uid: 65534,
            gid: 65534,
          }).status;
          writeFileSync(into, content, { flag: 'wx', mode: 0o600 });
        },
      },
    });
    const result = await run.handle.done;
    const out = run.stdout();
    expect(during.owner).toBe(0);
    expect(during.planted).not.toBe(0);
    expect(readdirSync(outside)).toEqual([]);
    expect(result).toMatchObject({ exit_code: 0, failure_reason: null });
    expect(out).toContain('reviewed');
    expect(out).toContain('65534');
    // Handed over once placed: the task owns its dir (not the inputs, 0444 and the worker's).
    expect(statSync(taskDir).uid).toBe(65534);
    expect(statSync(join(taskDir, 'a', 'train.py')).uid).toBe(0);
    expect(readFileSync(join(taskDir, 'a', 'train.py'))).toEqual(content);
  });
});
