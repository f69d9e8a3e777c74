import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type ChildMaster, CLI_PATH } from './child-master.js';

/**
 * A local worker in its own process for benchmarks, started exactly as an operator would
 * (`gpu-broker worker --gpus sim:N --json`, the default isolation: sandboxed, by the native sandbox on a
 * root host where it is built, else bwrap), so what it costs (CPU,
 * memory, disk) is its own and not the load generator's. The noisy-neighbour section needs this: a
 * worker shipping a log flood in the bench process would slow the very clients that measure.
 */

/** A running child worker. */
export interface ChildWorker {
  workerId: string;
  pid: number;
  dataDir: string;
  /** Resident set size of the worker process, in MiB (from /proc/PID/status). */
  rssMiB(): number;
  /** Bytes under the worker's data dir, in MiB (logs, outbox, executions). */
  diskMiB(): number;
  /** SIGTERM, wait (SIGKILL after `graceMs`), remove the data dir. */
  stop(graceMs?: number): Promise<void>;
}

/** How to start the child worker beyond its cards. */
export interface ChildWorkerOptions {
  /** The CLI to start (default CLI_PATH, this tree's), as ChildMasterOptions.cliPath. */
  cliPath?: string;
  /** More `gpu-broker worker` arguments, e.g. `['--isolation', 'none']`. */
  args?: string[];
}

/** Starts `gpu-broker worker` against `master` with `cards` simulated cards. */
export async function startChildWorker(
  master: ChildMaster,
  workerId: string,
  cards: number,
  opts: ChildWorkerOptions = {},
): Promise<ChildWorker> {
  const dataDir = mkdtempSync(join(tmpdir(), 'gpu-broker-bench-worker-'));
  const tokenFile = join(dataDir, 'worker.token');
  const caFile = join(dataDir, 'ca.pem');
  writeFileSync(tokenFile, await master.createToken(`${workerId}-token`, ['worker'], workerId), {
    mode: 0o600,
  });
  writeFileSync(caFile, master.caPem);
  const child: ChildProcess = spawn(
    process.execPath,
    [
      ...(process.env['GPU_BROKER_BENCH_WORKER_NODE_ARGS'] ?? '').split(' ').filter(Boolean),
      opts.cliPath ?? CLI_PATH,
      'worker',
      '--url',
      master.url,
      '--token-file',
      tokenFile,
      '--ca-file',
      caFile,
      '--id',
      workerId,
      '--gpus',
      `sim:${cards}`,
      '--data-dir',
      join(dataDir, 'state'),
      '--json',
      ...(opts.args ?? []),
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (d: string) => {
    stderr = (stderr + d).slice(-4000);
  });
  await new Promise<void>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`worker did not start in 30 s: ${stderr}`)), 30_000);
    void exited.then(() => reject(new Error(`worker exited during start: ${stderr}`)));
    child.stdout?.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      if (out.includes('\n')) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  const pid = child.pid!;
  return {
    workerId,
    pid,
    dataDir,
    rssMiB() {
      try {
        const status = readFileSync(`/proc/${pid}/status`, 'utf8');
        return Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? Number.NaN) / 1024;
      } catch {
        return Number.NaN;
      }
    },
    diskMiB() {
      return treeBytes(dataDir) / (1024 * 1024);
    },
    async stop(graceMs = 15_000) {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      const killer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(killer);
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** Bytes of the regular files under `dir` (files that vanish while it walks count as 0). */
function treeBytes(dir: string): number {
  let total = 0;
  let entries: import('node:fs').Dirent[];
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return 0;
  }
  for (const e of entries) {
    const p = join(dir, e.name);
    if (e.isDirectory()) total += treeBytes(p);
    else if (e.isFile()) {
      try {
        total += statSync(p).size;
      } catch {
        // removed meanwhile
      }
    }
  }
  return total;
}
