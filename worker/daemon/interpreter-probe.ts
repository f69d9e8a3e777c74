import { execFile } from 'node:child_process';
import type { ProbeMessage } from '../../src/contracts/worker-protocol.js';
import { HELPER_ENV } from '../sandbox/helper-commands.js';

/**
 * Probes the qualification interpreter the master names in its welcome (docs/operations.md): does it
 * import torch, which version, and which distributed backend would the workload use (nccl when CUDA or
 * ROCm cards are visible to torch, gloo otherwise). It runs on the host, outside any sandbox: the
 * sandbox binds the same /usr, so what imports here imports there.
 */

/** The probe's result, as the `probe` message carries it. */
export type ProbeResult = Pick<ProbeMessage, 'python' | 'torch_version' | 'backend' | 'error'>;

/** Longest a probe may take; importing torch is slow on a cold cache, but not this slow. */
const PROBE_TIMEOUT_MS = 60_000;

/** Prints one JSON line; a failed import is reported, not raised, so the exit status means "ran". */
const PROBE_SCRIPT = `
import json, sys
try:
    import torch
except BaseException as e:
    print(json.dumps({"error": type(e).__name__ + ": " + str(e)}))
    sys.exit(0)
backend = None
try:
    import torch.distributed as d
    if d.is_available():
        if torch.cuda.is_available() and d.is_nccl_available():
            backend = "nccl"
        elif d.is_gloo_available():
            backend = "gloo"
except BaseException:
    pass
print(json.dumps({"torch": str(torch.__version__), "backend": backend}))
`;

/** Runs the probe; never throws (a missing interpreter is a result like any other). */
export function probeInterpreter(python: string, timeoutMs = PROBE_TIMEOUT_MS): Promise<ProbeResult> {
  return new Promise((resolve) => {
    execFile(
      python,
      ['-c', PROBE_SCRIPT],
      { timeout: timeoutMs, maxBuffer: 1024 * 1024, env: { ...HELPER_ENV } },
      (err, stdout, stderr) => {
        const failed = (error: string): void =>
          resolve({ python, torch_version: null, backend: null, error: error.slice(-4096) });
        const last = stdout.trim().split('\n').pop() ?? '';
        const parsed = parseLine(last);
        if (parsed && typeof parsed.torch === 'string')
          return resolve({
            python,
            torch_version: parsed.torch.slice(0, 64),
            backend: parsed.backend === 'nccl' || parsed.backend === 'gloo' ? parsed.backend : null,
            error: null,
          });
        if (parsed && typeof parsed.error === 'string') return failed(parsed.error);
        const why = stderr.trim().split('\n').pop() || (err ? err.message : 'the probe printed nothing');
        failed(why);
      },
    );
  });
}

function parseLine(line: string): { torch?: unknown; backend?: unknown; error?: unknown } | null {
  try {
    const v = JSON.parse(line) as unknown;
    return typeof v === 'object' && v !== null ? v : null;
  } catch {
    return null;
  }
}
