import { existsSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { workloadPath } from '../../qualification/workload/location.js';
import type { MasterConfig } from '../platform/config.js';

/**
 * The quick start's policy (issue 11, item 2). Without `--config`, `gpu-broker start` writes a starter
 * config into the data dir (once; later starts read it, edits included) so an agent's first task — the
 * SKILL's `/usr/bin/python3 -c …` — is allowed. It allows `/usr/bin/python3` and `/bin/sh` only when
 * the local worker sandboxes its tasks: on an UNISOLATED worker an interpreter would be a shell on the
 * host, so there the starter allows nothing beyond the pinned qualification workload.
 */

/** Executables the starter config allows when the local worker is sandboxed. */
export const STARTER_EXECUTABLES = ['/usr/bin/python3', '/bin/sh'] as const;

/** The file `start` writes into the data dir. */
export function starterConfigPath(dataDir: string): string {
  return join(dataDir, 'config.json');
}

/** Writes the starter config unless the file exists; returns its path and whether it was written now. */
export function ensureStarterConfig(dataDir: string, sandboxed: boolean): { path: string; created: boolean } {
  const path = starterConfigPath(dataDir);
  if (existsSync(path)) return { path, created: false };
  const executables = sandboxed ? STARTER_EXECUTABLES.map((p) => ({ path: p })) : [];
  writeFileSync(path, `${JSON.stringify({ policy: { executables, allow_network: false } }, null, 2)}\n`, {
    mode: 0o600,
    flag: 'wx',
  });
  return { path, created: true };
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
