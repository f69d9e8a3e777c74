import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { containersLine, fallbackSummary, unisolatedSummary } from '../../../../src/cli/host/start.js';
import {
  decideStarter,
  ensureStarterConfig,
  type StarterAction,
  starterBannerLines,
  starterConfigText,
} from '../../../../src/cli/host/starter-config.js';
import { sha256Hex } from '../../../../src/platform/digest.js';
import { makeTempDir, removeTempDirs } from '../../../support/temp.js';

/** ADR 0025: a starter config nobody edited follows what the machine can do now. */

afterAll(() => removeTempDirs());

const SANDBOXED = starterConfigText(true);
const UNISOLATED = starterConfigText(false);
const EDITED = `${JSON.stringify({ policy: { executables: [{ path: '/usr/bin/python3' }] } })}\n`;

describe('decideStarter', () => {
  const rows: Array<[string, string | null, string | null, boolean, StarterAction]> = [
    ['no file', null, null, true, { kind: 'written' }],
    ['no file, unisolated', null, null, false, { kind: 'written' }],
    ['unisolated starter, now sandboxed', UNISOLATED, sha256Hex(UNISOLATED), true, { kind: 'rewritten' }],
    ['sandboxed starter, now unisolated', SANDBOXED, sha256Hex(SANDBOXED), false, { kind: 'rewritten' }],
    ['sandboxed starter, still sandboxed', SANDBOXED, sha256Hex(SANDBOXED), true, { kind: 'kept' }],
    ['starter from before the record', UNISOLATED, null, true, { kind: 'rewritten' }],
    [
      'an older starter format, recorded',
      '{"policy":{}}\n',
      sha256Hex('{"policy":{}}\n'),
      true,
      { kind: 'rewritten' },
    ],
    ['edited, sandboxed', EDITED, sha256Hex(UNISOLATED), true, { kind: 'edited', couldAllow: ['/bin/sh'] }],
    ['edited, unisolated', EDITED, sha256Hex(UNISOLATED), false, { kind: 'edited', couldAllow: [] }],
    ['edited, no record', EDITED, null, true, { kind: 'edited', couldAllow: ['/bin/sh'] }],
    ['not JSON', '{oops', null, true, { kind: 'edited', couldAllow: ['/usr/bin/python3', '/bin/sh'] }],
    [
      'record of another text',
      SANDBOXED.replace('false', 'true'),
      'ab12',
      true,
      { kind: 'edited', couldAllow: [] },
    ],
  ];
  it.each(rows)('%s', (_name, text, recordedSha256, sandboxed, action) => {
    expect(decideStarter({ text, recordedSha256 }, sandboxed)).toEqual(action);
  });
});

describe('ensureStarterConfig', () => {
  it('writes, rewrites when the sandbox changed, and never touches an edited file', () => {
    const dir = makeTempDir('starter');
    const path = join(dir, 'config.json');
    expect(ensureStarterConfig(dir, false).action).toEqual({ kind: 'written' });
    expect(readFileSync(path, 'utf8')).toBe(UNISOLATED);
    expect(readFileSync(`${path}.starter-sha256`, 'utf8').trim()).toBe(sha256Hex(UNISOLATED));
    expect(ensureStarterConfig(dir, true).action).toEqual({ kind: 'rewritten' });
    expect(readFileSync(path, 'utf8')).toBe(SANDBOXED);
    writeFileSync(path, EDITED);
    expect(ensureStarterConfig(dir, false).action).toEqual({ kind: 'edited', couldAllow: [] });
    expect(readFileSync(path, 'utf8')).toBe(EDITED);
  });

  it('records the digest of a starter written before the record existed', () => {
    const dir = makeTempDir('starter');
    writeFileSync(join(dir, 'config.json'), SANDBOXED);
    expect(ensureStarterConfig(dir, true).action).toEqual({ kind: 'kept' });
    expect(readFileSync(join(dir, 'config.json.starter-sha256'), 'utf8').trim()).toBe(sha256Hex(SANDBOXED));
  });
});

describe('starterBannerLines', () => {
  it('says in one line what was rewritten and why, and how to act on an edited file', () => {
    expect(starterBannerLines('/d/config.json', { kind: 'rewritten' }, true)).toEqual([
      '  config:          /d/config.json (starter config, rewritten: tasks are sandboxed now, so it allows /usr/bin/python3 and /bin/sh)',
    ]);
    const edited = starterBannerLines('/d/config.json', { kind: 'edited', couldAllow: ['/bin/sh'] }, true);
    expect(edited[1]).toContain('could allow:     /bin/sh');
    expect(edited[1]).toContain('delete config.json and restart');
  });
});

describe('the tasks: line when bubblewrap does not work', () => {
  it('says why and the exact command, not an --isolation none the user never passed', () => {
    const line = fallbackSummary(
      'cannot sandbox tasks: bubblewrap (bwrap) not found. Install it, or start the worker with --isolation none',
      false,
    );
    expect(line).toBe(
      'UNISOLATED (no working bubblewrap): tasks run as plain processes that can see this host. Why: cannot sandbox tasks: bubblewrap (bwrap) not found. Install bubblewrap (sudo apt-get install -y bubblewrap) and restart',
    );
  });
});

describe('the banner says each thing once', () => {
  it('an UNISOLATED tasks: line leaves require_isolation to the policy: line', () => {
    expect(unisolatedSummary('--isolation none')).not.toContain('require_isolation');
    expect(fallbackSummary('cannot sandbox tasks: bwrap failed', true)).not.toContain('require_isolation');
  });

  it('the containers: line drops the engine line\'s own "container tasks:" label', () => {
    expect(containersLine('container tasks: podman 5.0 (/usr/bin/podman, rootful, crun)')).toBe(
      'podman 5.0 (/usr/bin/podman, rootful, crun)',
    );
    const none = 'no container engine (--container-engine none): container tasks wait for another worker';
    expect(containersLine(none)).toBe(none);
  });
});
