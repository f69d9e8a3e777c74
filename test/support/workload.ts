import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import { workloadPath } from '../../qualification/workload/location.js';

/**
 * Runs the bundled qualification workload (qualification/workload/qualify.py) as the worker would: with
 * Debian's python3-torch, which is installed for /usr/bin/python3 (CPU only, gloo), not for whatever
 * python3 comes first on PATH, and a clean base env plus the binding the test gives.
 */

export const WORKLOAD_PYTHON = '/usr/bin/python3';

/** What one run of the workload printed and how it exited. */
export interface WorkloadRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the workload once with `env` over a minimal base (PATH, HOME). */
export function runWorkload(env: Record<string, string>): Promise<WorkloadRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(WORKLOAD_PYTHON, [workloadPath()], {
      env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', HOME: tmpdir(), ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}
