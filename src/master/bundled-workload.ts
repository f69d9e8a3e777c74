import { workloadPath, workloadSha256 } from '../../qualification/workload/location.js';
import { pinnedScripts } from '../contracts/policy.js';
import type { MasterConfig } from '../platform/config.js';

/**
 * The bundled qualification workload is always allowed, pinned by its sha256 (docs/qualification.md: with no config
 * file nothing else is). It runs under `qualification_python` (default /usr/bin/python3, where Debian's
 * python3-torch installs).
 */
export function withBundledWorkload(config: MasterConfig): MasterConfig {
  const script = workloadPath();
  if (pinnedScripts(config.policy.scripts).some((s) => s.script === script)) return config;
  const rule = { interpreter: config.qualification_python, script, sha256: workloadSha256() };
  return { ...config, policy: { ...config.policy, scripts: [...config.policy.scripts, rule] } };
}
