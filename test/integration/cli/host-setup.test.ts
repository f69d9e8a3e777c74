import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  decideHostSetup,
  type HostFacts,
  type HostSetupPlan,
  optionalLines,
  planLines,
  runHostSetup,
} from '../../../src/cli/host/host-setup.js';
import { packageRoot } from '../../../src/platform/package-root.js';
import { ensureBuilt } from '../../support/build.js';
import { makeTempDir, removeTempDirs } from '../../support/temp.js';

/**
 * ADR 0029: `npm start` installs what the quick start needs where it can (root with apt-get),
 * says precisely what it did or the command to run, and never fails. apt-get here is a fake on PATH that
 * records its arguments: no test installs anything.
 */

afterAll(() => removeTempDirs());
beforeAll(() => ensureBuilt());

const ALL: HostFacts = {
  bwrap: true,
  python3: true,
  torch: true,
  root: true,
  apt: true,
  skip: false,
  withTorch: false,
};

describe('decideHostSetup', () => {
  const rows: Array<[string, Partial<HostFacts>, HostSetupPlan]> = [
    ['everything there', {}, { kind: 'nothing', optional: [] }],
    ['no torch: advised, not installed', { torch: false }, { kind: 'nothing', optional: ['python3-torch'] }],
    [
      'no torch, asked for',
      { torch: false, withTorch: true },
      { kind: 'install', packages: ['python3-torch'], optional: [] },
    ],
    [
      'fresh Debian as root',
      { bwrap: false, python3: false, torch: false },
      { kind: 'install', packages: ['bubblewrap', 'python3'], optional: ['python3-torch'] },
    ],
    [
      'not root',
      { bwrap: false, root: false },
      { kind: 'advise', packages: ['bubblewrap'], optional: [], why: 'not-root' },
    ],
    [
      'no apt-get',
      { bwrap: false, apt: false },
      { kind: 'advise', packages: ['bubblewrap'], optional: [], why: 'no-apt' },
    ],
    [
      'skipped',
      { bwrap: false, skip: true },
      { kind: 'advise', packages: ['bubblewrap'], optional: [], why: 'skipped' },
    ],
    ['skipped, nothing missing', { skip: true }, { kind: 'nothing', optional: [] }],
  ];
  it.each(rows)('%s', (_name, facts, plan) => {
    expect(decideHostSetup({ ...ALL, ...facts })).toEqual(plan);
  });
});

describe('what it says', () => {
  it('names each missing package, what lacking it costs, and the exact command', () => {
    const notRoot = decideHostSetup({ ...ALL, bwrap: false, torch: false, root: false });
    expect(planLines(notRoot, false)).toEqual([
      'npm start setup: missing bubblewrap (without it tasks run UNISOLATED and only the pinned workload may run); run: sudo apt-get install -y bubblewrap',
    ]);
    expect(optionalLines(notRoot, false)[0]).toContain('sudo apt-get install -y python3-torch installs it');
    const root = decideHostSetup({ ...ALL, torch: false });
    expect(optionalLines(root, true)[0]).toContain('GPU_BROKER_SETUP_TORCH=1 npm start installs it');
    expect(planLines(decideHostSetup({ ...ALL, python3: false, apt: false }), true)).toEqual([
      'npm start setup: missing python3 (without it the starter config allows /usr/bin/python3, which is not there); no apt-get here: install python3 with your package manager',
    ]);
  });
});

/** A directory holding a fake apt-get that appends its arguments to `calls` and exits `code`. */
function fakeApt(code: number): { dir: string; calls: string } {
  const dir = makeTempDir('fake-apt');
  const calls = join(dir, 'calls');
  const script = `#!/bin/sh\necho "$DEBIAN_FRONTEND $*" >> ${calls}\n[ ${code} -eq 0 ] || echo "E: Unable to locate package" >&2\nexit ${code}\n`;
  writeFileSync(join(dir, 'apt-get'), script);
  chmodSync(join(dir, 'apt-get'), 0o755);
  return { dir, calls };
}

describe('runHostSetup', () => {
  it('as root with apt-get: updates, installs without recommends, and says what it installed', () => {
    const apt = fakeApt(0);
    const lines: string[] = [];
    runHostSetup({ ...ALL, bwrap: false, torch: false }, { PATH: apt.dir }, (l) => lines.push(l));
    expect(readFileSync(apt.calls, 'utf8')).toBe(
      'noninteractive update -qq\nnoninteractive install -y -qq --no-install-recommends bubblewrap\n',
    );
    expect(lines).toEqual([
      'npm start setup: installing bubblewrap with apt-get (GPU_BROKER_NO_SETUP=1 skips this)…',
      'npm start setup: installed bubblewrap',
      expect.stringContaining('npm start setup: not installed: python3-torch'),
    ]);
  });

  it('when apt-get fails (offline, unknown package), says why and the command, and does not throw', () => {
    const apt = fakeApt(100);
    const lines: string[] = [];
    runHostSetup({ ...ALL, bwrap: false }, { PATH: apt.dir }, (l) => lines.push(l));
    expect(lines[1]).toBe(
      'npm start setup: could not install (apt-get update exited 100: E: Unable to locate package); run: apt-get install -y bubblewrap — starting anyway',
    );
  });
});

describe('the built step npm start runs first', () => {
  const entry = () => join(packageRoot(), 'dist', 'src', 'cli', 'host', 'npm-start-setup.js');
  const runEntry = (env: Record<string, string>) =>
    spawnSync(process.execPath, [entry()], { env, encoding: 'utf8', timeout: 30_000 });

  it('GPU_BROKER_NO_SETUP=1 installs nothing, says what is missing, and exits 0', () => {
    const apt = fakeApt(0);
    const r = runEntry({ PATH: apt.dir, GPU_BROKER_NO_SETUP: '1' });
    expect(r.status).toBe(0);
    expect(r.stderr).toContain('GPU_BROKER_NO_SETUP=1, nothing installed; missing bubblewrap');
    expect(existsSync(apt.calls)).toBe(false);
  });

  it('exits 0 when apt-get fails or it may not install', () => {
    const apt = fakeApt(100);
    const r = runEntry({ PATH: apt.dir });
    expect(r.status).toBe(0);
    expect(r.stderr).toContain(
      process.getuid?.() === 0 ? 'could not install' : 'run: sudo apt-get install -y bubblewrap',
    );
  });
});
