import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { workloadPath } from '../../../qualification/workload/location.js';
import type { MasterConfig } from '../../platform/config.js';
import { sha256Hex } from '../../platform/digest.js';

/**
 * The quick start's policy (docs/operations.md). Without `--config`, `gpu-broker start` writes a starter
 * config into the data dir so an agent's first task — the SKILL's `/usr/bin/python3 -c …` — is allowed.
 * It allows `/usr/bin/python3` and `/bin/sh` only when the local worker sandboxes its tasks: on an
 * UNISOLATED worker an interpreter would be a shell on the host, so there the starter allows nothing
 * beyond the pinned qualification workload.
 *
 * A starter nobody edited follows what the machine can do now (ADR 0025: install bubblewrap,
 * restart, and python3 is allowed): next to it, `config.json.starter-sha256` records the sha256 of what
 * was written, and a file that still has that digest — or is byte for byte one of the starters this
 * version writes, for data dirs from before the record — is rewritten when the sandbox changed. An edited
 * file is the operator's: it is kept, and the banner says what the machine could allow now.
 */

/** Executables the starter config allows when the local worker is sandboxed. */
export const STARTER_EXECUTABLES = ['/usr/bin/python3', '/bin/sh'] as const;

/** The file `start` writes into the data dir. */
export function starterConfigPath(dataDir: string): string {
  return join(dataDir, 'config.json');
}

/** Where the digest of the starter last written is recorded. */
function recordPath(configPath: string): string {
  return `${configPath}.starter-sha256`;
}

/** The starter config's text for a sandboxed or an UNISOLATED local worker. */
export function starterConfigText(sandboxed: boolean): string {
  const executables = sandboxed ? STARTER_EXECUTABLES.map((p) => ({ path: p })) : [];
  return `${JSON.stringify({ policy: { executables, allow_network: false } }, null, 2)}\n`;
}

/** What is on disk: the config's text (null: no file) and the recorded digest (null: no record). */
export interface StarterOnDisk {
  text: string | null;
  recordedSha256: string | null;
}

/**
 * What `start` does with the starter config:
 * - `written`: there was none; written for this machine.
 * - `kept`: unedited, and already what this machine allows.
 * - `rewritten`: unedited, written for another sandbox; rewritten for this one.
 * - `edited`: changed by someone; kept as it is. `couldAllow` lists the starter executables it lacks
 *   that this machine's sandbox would allow (empty when unsandboxed or all present).
 */
export type StarterAction =
  | { kind: 'written' }
  | { kind: 'kept' }
  | { kind: 'rewritten' }
  | { kind: 'edited'; couldAllow: string[] };

/** Executables an edited config names (none when it is not the JSON shape expected; the master says why). */
function executablesOf(text: string): string[] {
  try {
    const parsed = JSON.parse(text) as { policy?: { executables?: Array<{ path?: unknown }> } };
    return (parsed.policy?.executables ?? []).map((e) => String(e?.path));
  } catch {
    return [];
  }
}

/** Decides what to do with the starter config (pure: the file's text and record in, an action out). */
export function decideStarter(disk: StarterOnDisk, sandboxed: boolean): StarterAction {
  if (disk.text === null) return { kind: 'written' };
  const wanted = starterConfigText(sandboxed);
  const unedited =
    sha256Hex(disk.text) === disk.recordedSha256 ||
    disk.text === starterConfigText(true) ||
    disk.text === starterConfigText(false);
  if (unedited) return disk.text === wanted ? { kind: 'kept' } : { kind: 'rewritten' };
  const has = new Set(executablesOf(disk.text));
  return { kind: 'edited', couldAllow: sandboxed ? STARTER_EXECUTABLES.filter((p) => !has.has(p)) : [] };
}

function readOrNull(path: string): string | null {
  return existsSync(path) ? readFileSync(path, 'utf8') : null;
}

/** Writes `text` whole (a temp file renamed over the old one), then records its digest. */
function writeStarter(path: string, text: string): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, text, { mode: 0o600 });
  renameSync(tmp, path);
  writeFileSync(recordPath(path), `${sha256Hex(text)}\n`, { mode: 0o600 });
}

/** Reads the starter config, decides, and writes it when the decision says so. */
export function ensureStarterConfig(
  dataDir: string,
  sandboxed: boolean,
): { path: string; action: StarterAction } {
  const path = starterConfigPath(dataDir);
  const text = readOrNull(path);
  const disk = { text, recordedSha256: readOrNull(recordPath(path))?.trim() ?? null };
  const action = decideStarter(disk, sandboxed);
  if (action.kind === 'written' || action.kind === 'rewritten')
    writeStarter(path, starterConfigText(sandboxed));
  // A starter from before the record: record it, so it is still recognised if its text changes format.
  else if (action.kind === 'kept' && disk.recordedSha256 === null && text !== null)
    writeFileSync(recordPath(path), `${sha256Hex(text)}\n`, { mode: 0o600 });
  return { path, action };
}

/** The banner's `config:` line for the starter config, and a second line when the operator has to act. */
export function starterBannerLines(path: string, action: StarterAction, sandboxed: boolean): string[] {
  const now = sandboxed
    ? 'tasks are sandboxed now, so it allows /usr/bin/python3 and /bin/sh'
    : 'tasks run UNISOLATED now, so it allows only the pinned workload';
  switch (action.kind) {
    case 'written':
      return [`  config:          ${path} (starter config, written now)`];
    case 'kept':
      return [`  config:          ${path} (starter config from an earlier start)`];
    case 'rewritten':
      return [`  config:          ${path} (starter config, rewritten: ${now})`];
    case 'edited':
      return [
        `  config:          ${path} (edited by you, kept as it is)`,
        ...(action.couldAllow.length > 0
          ? [
              `  could allow:     ${action.couldAllow.join(', ')} (tasks are sandboxed now): add to policy.executables, or delete ${basename(path)} and restart for a fresh starter`,
            ]
          : []),
      ];
  }
}

/**
 * The banner's lines for the policy actually in force (after the master added the bundled workload):
 * which executables and scripts may run, and whether a task may ask for the network.
 */
export function policyBannerLines(policy: MasterConfig['policy']): string[] {
  const executables = policy.executables.map((e) => `${e.path}${e.sha256 ? ' (pinned)' : ''}`);
  const scripts = policy.scripts.map((s) =>
    !('script' in s)
      ? `${s.interpreter} <a script from the task's reviewed inputs>`
      : s.script === workloadPath()
        ? `the bundled qualification workload (${s.interpreter} ${basename(s.script)}, pinned)`
        : `${s.interpreter} ${s.script} (pinned)`,
  );
  const images = policy.images.map((i) => i.ref);
  return [
    `  may run:         ${[...executables, ...scripts].join(', ') || 'nothing'}`,
    ...(images.length > 0 ? [`  images:          ${images.join(', ')}`] : []),
    `  network:         ${policy.allow_network ? 'tasks may ask for network "host" (reviewed)' : 'none for any task (policy.allow_network is false)'}`,
  ];
}
