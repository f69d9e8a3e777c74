import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pinsProblem } from '../../../../worker/executions/pin-check.js';
import { startExecution } from '../../../../worker/local/executor.js';
import { probeBwrap, systemMounts } from '../../../../worker/sandbox/bwrap.js';
import { makeSimDeviceNodes } from '../../../../worker/sandbox/devices.js';
import type { SandboxSetup } from '../../../../worker/sandbox/setup.js';
import { TaskUidPool } from '../../../../worker/sandbox/task-uids.js';
import { type DataMount, mountsAsDeclared } from '../../../../worker/task-io/mounts.js';
import type { Chunk } from '../../../support/executor-plan.js';
import { makePlan, text } from '../../../support/executor-plan.js';
import { isRoot, requireOrSkip } from '../../../support/require-or-skip.js';

/**
 * docs/security.md "The task sandbox", attacked again by a second tenant of the host: each task start checks that a
 * declared mount path resolves to itself, then bwrap binds it, resolving it again. Whoever can write a
 * directory on the way (another local user owning it, or a directory writable by all without the sticky
 * bit) can flip it between the two (an atomic RENAME_EXCHANGE of the real directory and a symbolic
 * link), and a task of another owner gets another host directory at /mnt/<name>. So a declared path
 * whose directories on the way are not the worker's (root's) alone is refused, at start and at each
 * task's start. A pinned file likewise: its sha256 is checked when the worker accepts the plan and the
 * sandbox binds its directory later, so a file (or a directory on the way) another user may change
 * makes the pin mean nothing.
 */

const NOBODY = 65534;
const probe = await probeBwrap({ root: isRoot });
const ready = requireOrSkip(
  'bubblewrap as root',
  isRoot && probe.ok && probe.bwrap !== null && probe.env !== null,
  probe.detail,
);

let root: string;
let base: Extract<SandboxSetup, { kind: 'bwrap' }>;
let mounts: DataMount[];
let flipper: ChildProcess | null = null;

beforeAll(async () => {
  if (!ready || probe.bwrap === null || probe.env === null) return;
  root = mkdtempSync(join('/var/tmp', 'gpu-broker-mounts-race-'));
  chmodSync(root, 0o755);
  // The other tenant's dir on the way: /…/tenant (theirs) / shared / models (the data set).
  const tenant = join(root, 'tenant');
  mkdirSync(join(tenant, 'shared/models'), { recursive: true, mode: 0o755 });
  writeFileSync(join(tenant, 'shared/models/key'), 'the-data-set', { mode: 0o644 });
  // What they would rather give: another host directory (root's, readable), reached by a link.
  mkdirSync(join(root, 'host-elsewhere/models'), { recursive: true, mode: 0o755 });
  chmodSync(join(root, 'host-elsewhere'), 0o755);
  writeFileSync(join(root, 'host-elsewhere/models/key'), 'ANOTHER-HOST-DIR', { mode: 0o644 });
  symlinkSync(join(root, 'host-elsewhere'), join(tenant, 'evil'));
  for (const p of ['', 'shared', 'shared/models', 'shared/models/key', 'evil'])
    chownSync(join(tenant, p), NOBODY, NOBODY);
  mounts = [{ name: 'models', host_path: join(tenant, 'shared/models'), read_only: true }];
  mkdirSync(join(root, 'worker-data'), { mode: 0o700 });
  base = {
    kind: 'bwrap',
    bwrap: probe.bwrap,
    setpriv: probe.setpriv,
    envHelper: probe.env,
    native: null,
    uids: new TaskUidPool({ first: 2_000_560_000, last: 2_000_560_099 }),
    hiddenPaths: [join(root, 'worker-data')],
    system: systemMounts(),
    simNodes: await makeSimDeviceNodes(join(root, 'worker-data/devices'), 1, true),
  };
});
afterAll(() => {
  flipper?.kill('SIGKILL');
  if (root !== undefined) rmSync(root, { recursive: true, force: true });
});

/** As the other tenant (uid nobody): exchange `shared` and the link `evil` for ever, atomically. */
function startFlipping(tenant: string): ChildProcess {
  const script = `
import ctypes, os, sys
os.setgid(${NOBODY}); os.setuid(${NOBODY})
libc = ctypes.CDLL(None, use_errno=True)
a, b = sys.argv[1].encode(), sys.argv[2].encode()
while True:
    libc.renameat2(-100, a, -100, b, 2)
`;
  return spawn('/usr/bin/python3', ['-c', script, join(tenant, 'shared'), join(tenant, 'evil')], {
    stdio: 'ignore',
  });
}

async function run(): Promise<{ reason: string | null; stdout: string }> {
  const chunks: Chunk[] = [];
  const handle = startExecution(
    makePlan({ argv: ['/bin/sh', '-c', 'cat /mnt/models/key 2>/dev/null || echo NONE'], mounts: ['models'] }),
    {
      rootDir: join(root, 'worker-data/executions'),
      workerId: 'worker-mounts-race',
      provider: 'sim',
      onLog: (stream, offset, data) => chunks.push({ stream, offset, data }),
      cleanupPollMs: 20,
      sandbox: base,
      mounts,
    },
  );
  const result = await handle.done;
  return { reason: result.failure_reason, stdout: text(chunks, 'stdout') };
}

describe.runIf(ready)('a declared mount path on a directory another user can write', () => {
  it('is refused as declared (at start and at each task start), naming the directory', async () => {
    const problem = await mountsAsDeclared([{ name: 'models', hostPath: mounts[0]!.host_path }]);
    expect(problem).toContain(`${join(root, 'tenant/shared')} is writable by uid ${NOBODY} (its owner)`);
  });

  it('attack: flipped by its owner while tasks start, no task ever gets another host directory', async () => {
    flipper = startFlipping(join(root, 'tenant'));
    const seen = new Map<string, number>();
    try {
      for (let i = 0; i < 25; i++) {
        const r = await run();
        const what = r.reason ?? r.stdout.trim();
        seen.set(what, (seen.get(what) ?? 0) + 1);
        if (what === 'ANOTHER-HOST-DIR') break;
      }
    } finally {
      flipper.kill('SIGKILL');
      flipper = null;
    }
    expect(seen.get('ANOTHER-HOST-DIR') ?? 0, JSON.stringify([...seen])).toBe(0);
    expect(seen.get('the-data-set') ?? 0, JSON.stringify([...seen])).toBe(0);
  }, 120_000);
});

describe.runIf(ready)('a pinned file another user can change', () => {
  const sha = (b: string) => createHash('sha256').update(b).digest('hex');
  it("is refused when it, or a directory on the way, is not root's alone", () => {
    // A file of its own: the flipping test before leaves tenant/shared exchanged for the link or not,
    // as its last exchange fell when it was killed.
    const dir = join(root, 'pin-tenant');
    mkdirSync(dir, { mode: 0o755 });
    const theirs = join(dir, 'key');
    writeFileSync(theirs, 'the-data-set', { mode: 0o644 });
    chownSync(dir, NOBODY, NOBODY);
    chownSync(theirs, NOBODY, NOBODY);
    expect(pinsProblem([{ path: theirs, sha256: sha('the-data-set') }])).toContain(
      `${theirs} is writable by uid ${NOBODY} (its owner)`,
    );
    const open = join(root, 'open.sh');
    writeFileSync(open, 'echo hi\n');
    chmodSync(open, 0o666);
    expect(pinsProblem([{ path: open, sha256: sha('echo hi\n') }])).toContain('is writable by every user');
    chmodSync(open, 0o644);
    expect(pinsProblem([{ path: open, sha256: sha('echo hi\n') }])).toBeNull();
  });
});
