import { systemMounts } from '../../worker/sandbox/bwrap.js';
import { probeNativeSandbox } from '../../worker/sandbox/native.js';
import { isRoot, requireOrSkip } from './require-or-skip.js';

/**
 * What builds a root worker's sandboxes in the suites that attack the sandbox (ADR 0038): bwrap + setpriv
 * + env always, and the native sandbox (dist/native/gpu-broker-sandbox, built by `npm run build`) on a
 * root host, where CI may not skip it. Each suite runs its attacks once per engine.
 */
export interface SandboxEngine {
  readonly name: 'bwrap' | 'native';
  /** SandboxSetup's `native`: the executable, or null for bwrap. */
  readonly native: string | null;
}

const probe = isRoot ? await probeNativeSandbox({ root: true, system: systemMounts() }) : null;
const nativeReady =
  probe !== null && requireOrSkip('the native sandbox (npm run build)', probe.path !== null, probe.detail);

export const SANDBOX_ENGINES: readonly SandboxEngine[] = [
  { name: 'bwrap', native: null },
  ...(nativeReady && probe?.path != null ? [{ name: 'native' as const, native: probe.path }] : []),
];
