import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startExecution } from '../../../../worker/local/executor.js';
import { probeBwrap } from '../../../../worker/sandbox/bwrap.js';
import type { SandboxSetup } from '../../../../worker/sandbox/setup.js';
import type { DataMount } from '../../../../worker/task-io/mounts.js';
import type { Chunk } from '../../../support/executor-plan.js';
import { makePlan, text } from '../../../support/executor-plan.js';
import { bwrapSetupFor } from '../../../support/local-sandbox.js';
import { isRoot, requireOrSkip } from '../../../support/require-or-skip.js';
import { SANDBOX_ENGINES } from '../../../support/sandbox-engines.js';

/**
 * docs/security.md "The task sandbox", attacked again: a policy `hidden_paths` entry is the operator's text, matched against
 * the declared mounts by prefix. Written another way than the mount's canonical path (through a
 * symbolic link such as a `/srv/data -> /data` alias, or with `..`), the same directory was not covered
 * again below `/mnt/<name>`: the task read what the policy hides. Both spellings must stay hidden.
 */

const probe = await probeBwrap({ root: isRoot });
const ready = requireOrSkip(
  'bubblewrap',
  probe.ok && probe.bwrap !== null && probe.env !== null,
  probe.detail,
);

let root: string;
let base: Extract<SandboxSetup, { kind: 'bwrap' }>;
let mounts: DataMount[];
const SECRET = 'the-secret-behind-an-alias';

beforeAll(async () => {
  if (!ready || probe.bwrap === null || probe.env === null) return;
  root = mkdtempSync(join('/var/tmp', 'gpu-broker-hidden-alias-'));
  chmodSync(root, 0o755);
  mkdirSync(join(root, 'data/secret'), { recursive: true, mode: 0o755 });
  chmodSync(join(root, 'data'), 0o755);
  chmodSync(join(root, 'data/secret'), 0o755);
  writeFileSync(join(root, 'data/secret/key'), SECRET, { mode: 0o644 });
  writeFileSync(join(root, 'data/labels.txt'), 'cat\n', { mode: 0o644 });
  mkdirSync(join(root, 'other'), { mode: 0o755 });
  symlinkSync(join(root, 'data'), join(root, 'alias'));
  mkdirSync(join(root, 'worker-data'), { mode: 0o755 });
  // A worker's state dir named through a link (`--data-dir /data/gb` where /data -> /var/lib/data).
  mkdirSync(join(root, 'state'), { mode: 0o755 });
  writeFileSync(join(root, 'state/token'), 'worker-token', { mode: 0o644 });
  symlinkSync(join(root, 'state'), join(root, 'state-link'));
  mounts = [{ name: 'data', host_path: join(root, 'data'), read_only: true }];
  base = await bwrapSetupFor(probe, root, {
    uids: { first: 2_000_530_000, last: 2_000_530_099 },
    hiddenPaths: [join(root, 'worker-data')],
    devicesDir: join(root, 'worker-data/devices'),
  });
});
afterAll(() => {
  if (root !== undefined) rmSync(root, { recursive: true, force: true });
});

async function run(sandbox: SandboxSetup, hiddenPaths: string[]) {
  const chunks: Chunk[] = [];
  const handle = startExecution(
    makePlan({
      argv: [
        '/bin/sh',
        '-c',
        'cat /mnt/data/labels.txt; cat /mnt/data/secret/key 2>/dev/null || echo NO_KEY',
      ],
      mounts: ['data'],
      hiddenPaths,
    }),
    {
      rootDir: join(root, 'worker-data/executions'),
      workerId: 'worker-hidden-alias',
      provider: 'sim',
      onLog: (stream, offset, data) => chunks.push({ stream, offset, data }),
      cleanupPollMs: 20,
      sandbox,
      mounts,
    },
  );
  const result = await handle.done;
  return { result, stdout: text(chunks, 'stdout'), stderr: text(chunks, 'stderr') };
}

async function runArgv(sandbox: SandboxSetup, script: string) {
  const chunks: Chunk[] = [];
  const handle = startExecution(makePlan({ argv: ['/bin/sh', '-c', script] }), {
    rootDir: join(root, 'worker-data/executions'),
    workerId: 'worker-hidden-alias',
    provider: 'sim',
    onLog: (stream, offset, data) => chunks.push({ stream, offset, data }),
    cleanupPollMs: 20,
    sandbox,
    mounts,
  });
  const result = await handle.done;
  return { result, stdout: text(chunks, 'stdout'), stderr: text(chunks, 'stderr') };
}

describe.runIf(ready).each(SANDBOX_ENGINES)(
  'a hidden path spelled another way, built by $name',
  ({ native }) => {
    it('attack: named through a symbolic link to the mount, it stays hidden at /mnt/<name>', async () => {
      const r = await run({ ...base, native }, [join(root, 'alias/secret')]);
      expect(r.result.failure_reason, r.stderr).toBeNull();
      expect(r.stdout).toBe('cat\nNO_KEY\n');
    });

    it("attack: the worker's own hidden dir, named through a link, is not shown where a system dir (/var) shows it", async () => {
      const r = await runArgv(
        { ...base, native, hiddenPaths: [join(root, 'worker-data'), join(root, 'state-link')] },
        `cat ${root}/state/token 2>/dev/null || echo NO_TOKEN`,
      );
      expect(r.result.failure_reason, r.stderr).toBeNull();
      expect(r.stdout).toBe('NO_TOKEN\n');
    });

    it('attack: named with "..", it stays hidden at /mnt/<name>', async () => {
      const r = await run({ ...base, native }, [`${root}/other/../data/secret`]);
      expect(r.result.failure_reason, r.stderr).toBeNull();
      expect(r.stdout).toBe('cat\nNO_KEY\n');
    });
  },
);
