import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeBwrap } from '../../../../worker/sandbox/bwrap.js';
import type { SandboxSetup } from '../../../../worker/sandbox/setup.js';
import type { DataMount } from '../../../../worker/task-io/mounts.js';
import type { PlanOptions } from '../../../support/executor-plan.js';
import { makePlan } from '../../../support/executor-plan.js';
import { type BwrapSetup, bwrapSetupFor, runToEnd } from '../../../support/local-sandbox.js';
import { isRoot, requireOrSkip } from '../../../support/require-or-skip.js';
import { SANDBOX_ENGINES } from '../../../support/sandbox-engines.js';

/**
 * docs/security.md "The task sandbox": a named mount binds exactly the path its operator declared, and a hidden path stays
 * hidden under pinned program directories and named mounts. On both sandbox engines, as a hostile task
 * (or a host process acting for an earlier one) would try it.
 */

const probe = await probeBwrap({ root: isRoot });
const ready = requireOrSkip(
  'bubblewrap',
  probe.ok && probe.bwrap !== null && probe.env !== null,
  probe.detail,
);

let root: string;
let base: BwrapSetup;
let mounts: DataMount[];
const SECRET = 'the-secret-under-a-bind';

beforeAll(async () => {
  if (!ready || probe.bwrap === null || probe.env === null) return;
  root = mkdtempSync(join('/var/tmp', 'gpu-broker-mounts-'));
  chmodSync(root, 0o755);
  const dir = (p: string) => {
    mkdirSync(join(root, p), { recursive: true, mode: 0o755 });
    chmodSync(join(root, p), 0o755);
    return join(root, p);
  };
  // A data set whose tree holds a policy-hidden dir, a project dir the policy pins a script in (with a
  // hidden dir of its own below it), and a models dir a host process will swap for a symbolic link.
  writeFileSync(join(dir('data/secret'), 'key'), SECRET, { mode: 0o644 });
  writeFileSync(join(dir('data'), 'labels.txt'), 'cat\n', { mode: 0o644 });
  writeFileSync(join(dir('proj/.secrets'), 'key'), SECRET, { mode: 0o644 });
  writeFileSync(join(root, 'proj/train.sh'), 'echo train\n', { mode: 0o755 });
  writeFileSync(join(dir('models'), 'weights'), 'w\n', { mode: 0o644 });
  dir('worker-data');
  mounts = [
    { name: 'data', host_path: join(root, 'data'), read_only: true },
    { name: 'models', host_path: join(root, 'models'), read_only: true },
  ];
  base = await bwrapSetupFor(probe, root, {
    uids: { first: 2_000_300_000, last: 2_000_300_099 },
    hiddenPaths: [join(root, 'worker-data'), join(root, 'proj/.secrets')],
    devicesDir: join(root, 'worker-data/devices'),
  });
});
afterAll(() => {
  if (root !== undefined) rmSync(root, { recursive: true, force: true });
});

function run(sandbox: SandboxSetup, plan: Partial<PlanOptions> & { argv: string[] }) {
  return runToEnd(makePlan(plan), { rootDir: join(root, 'worker-data/executions'), sandbox, mounts });
}

const sh = (script: string) => ['/bin/sh', '-c', script];

describe.runIf(ready).each(SANDBOX_ENGINES)('named mounts and hidden paths, built by $name', ({ native }) => {
  it('attack: a policy-hidden dir below a read-only mount stays hidden at /mnt/<name>', async () => {
    const r = await run(
      { ...base, native },
      {
        argv: sh(
          'cat /mnt/data/labels.txt; ls -A /mnt/data/secret; cat /mnt/data/secret/key 2>/dev/null || echo NO_KEY',
        ),
        mounts: ['data'],
        hiddenPaths: [join(root, 'data/secret')],
      },
    );
    expect(r.result.failure_reason, r.stderr).toBeNull();
    expect(r.stdout).toBe('cat\nNO_KEY\n');
  });

  it("attack: the worker's hidden dir below a pinned program dir stays hidden there", async () => {
    const script = join(root, 'proj/train.sh');
    const sha256 = createHash('sha256').update('echo train\n').digest('hex');
    const r = await run(
      { ...base, native },
      {
        argv: sh(
          `${script}; ls -A ${root}/proj/.secrets; cat ${root}/proj/.secrets/key 2>/dev/null || echo NO_KEY`,
        ),
        pins: [{ path: script, sha256 }],
      },
    );
    expect(r.result.failure_reason, r.stderr).toBeNull();
    expect(r.stdout).toBe('train\nNO_KEY\n');
  });

  it('refuses a mount that lies inside a policy-hidden path, naming both', async () => {
    const r = await run(
      { ...base, native },
      { argv: sh('ls /mnt/data'), mounts: ['data'], hiddenPaths: [root] },
    );
    expect(r.result.failure_reason).toBe('SETUP_FAILED');
    expect(r.result.setup_error).toContain(
      `mount "data" (${join(root, 'data')}) lies inside the policy's hidden path ${root}`,
    );
  });

  it('attack: a declared path swapped for a symbolic link (to /etc) after the worker started binds nothing', async () => {
    const models = join(root, 'models');
    renameSync(models, `${models}.real`);
    symlinkSync('/etc', models);
    try {
      const r = await run({ ...base, native }, { argv: sh('ls /mnt/models'), mounts: ['models'] });
      expect(r.result.failure_reason).toBe('SETUP_FAILED');
      expect(r.result.setup_error).toContain(`mount models (${models}) resolves to /etc`);
      expect(r.stdout).toBe('');
    } finally {
      rmSync(models);
      renameSync(`${models}.real`, models);
    }
  });
});
