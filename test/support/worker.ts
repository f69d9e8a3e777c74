import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { HostResources } from '../../src/contracts/task-limits.js';
import type { IsolationMode } from '../../src/contracts/worker-protocol.js';
import { type Logger, silentLogger } from '../../src/platform/logger.js';
import { hostResources } from '../../worker/daemon/hello.js';
import { type RunningWorker, startWorker } from '../../worker/daemon/start-worker.js';
import type { CardSampler } from '../../worker/samplers/card-sampler.js';
import { SimSampler } from '../../worker/samplers/sim-sampler.js';
import type { ContainerEngineChoice } from '../../worker/sandbox/container.js';
import { prepareSandbox } from '../../worker/sandbox/setup.js';
import type { DataMount } from '../../worker/task-io/mounts.js';
import type { TestMaster } from './master.js';
import { makeTempDir, removeTempDir } from './temp.js';

/**
 * A real worker daemon for cluster tests: `startWorker` in this process, talking WSS to a master (a
 * `TestMaster`, a child-process master, or a TCP proxy in front of either), with short reconnect
 * backoff so a restored link is used within a fraction of a second.
 */

/** Where a worker connects and with what. */
export interface TestWorkerOptions {
  /** The master's base URL (https://127.0.0.1:PORT), or a proxy's. */
  url: string;
  /** PEM of the CA that signed the master's certificate; null for plain http. */
  caPem: string | null;
  /** A worker token bound to `workerId`. */
  token: string;
  workerId: string;
  /** Default: `SimSampler` with `simCards` cards seeded by the worker id. */
  sampler?: CardSampler;
  /** Simulated cards when no sampler is given; default 4. */
  simCards?: number;
  /** Default: a fresh temp dir. Reuse one to restart a worker on its old state. */
  dataDir?: string;
  /** Sample interval until the welcome says otherwise; default 200 ms. */
  sampleIntervalMs?: number;
  /** Default: silent. */
  logger?: Logger;
  /**
   * How tasks run: `bwrap` (default, the real sandbox, as `auto` picks on this machine) or `none`
   * (plain process groups; the worker is UNISOLATED and gets tasks only when the master's policy sets
   * `require_isolation: false`).
   */
  isolation?: IsolationMode;
  /** More host paths hidden from tasks (e.g. the master's data dir). */
  hiddenPaths?: string[];
  /**
   * The engine for `container` tasks: default `none` (no probe, so other tests start as fast as before);
   * `auto` or `podman` for container tests (this machine's podman with runc).
   */
  containerEngine?: ContainerEngineChoice;
  /** Named data mounts the worker offers. */
  mounts?: DataMount[];
  /** The host its hello reports (default: this machine's; null: none). */
  hostResources?: HostResources | null;
}

/** A worker under test. */
export interface TestWorker {
  worker: RunningWorker;
  workerId: string;
  dataDir: string;
  sampler: CardSampler;
  /** Clean stop (cancels running executions), then removes the data dir if the harness made it; idempotent. */
  close(): Promise<void>;
}

/** What a test worker's hello reports by default: this machine, its disk capped (see startTestWorker). */
export const TEST_HOST_DISK_MIB = 16384;

function testHost(dataDir: string): HostResources | null {
  const host = hostResources(dataDir);
  return host === null ? null : { ...host, disk_mib: Math.min(host.disk_mib, TEST_HOST_DISK_MIB) };
}

/** Starts a worker; resolves once it is dialling (use `waitFor` on the master for its cards). */
export async function startTestWorker(opts: TestWorkerOptions): Promise<TestWorker> {
  const ownsDir = opts.dataDir === undefined;
  const dataDir = opts.dataDir ?? makeTempDir(`worker-${opts.workerId}`);
  const sampler = opts.sampler ?? new SimSampler({ count: opts.simCards ?? 4, seed: opts.workerId });
  const sandbox = await prepareSandbox({
    isolation: opts.isolation ?? 'bwrap',
    dataDir,
    sampler,
    hiddenPaths: opts.hiddenPaths ?? [],
    containerEngine: opts.containerEngine ?? 'none',
    // A fake nvidia-smi / hy-smi stands for cards this machine lacks; their device nodes are faked too.
    ...(sampler instanceof SimSampler ? {} : { devDir: await makeFakeDevDir(join(dataDir, 'fake-dev')) }),
  });
  const worker = await startWorker({
    sandbox: sandbox.setup,
    ...(sandbox.containers === undefined ? {} : { containers: sandbox.containers }),
    masterUrl: opts.url,
    token: opts.token,
    workerId: opts.workerId,
    dataDir,
    sampler,
    logger: opts.logger ?? silentLogger(),
    sampleIntervalMs: opts.sampleIntervalMs ?? 200,
    backoff: { initialMs: 50, maxMs: 250, refusedMs: 500, unavailableMs: 300 },
    cleanupPollMs: 50,
    pingIntervalMs: 1000,
    welcomeTimeoutMs: 3000,
    firstSampleWaitMs: 2000,
    ...(opts.mounts === undefined ? {} : { mounts: opts.mounts }),
    // This machine's RAM and CPUs, but at most TEST_HOST_DISK_MIB of disk: every test's workers share one
    // data file system, and each running task's dir takes its room there when it is made (ADR 0043), so
    // a worker taking its share of all the free room would leave none for the others'.
    hostResources: opts.hostResources === undefined ? testHost(dataDir) : opts.hostResources,
    ...(opts.caPem === null ? {} : { ca: opts.caPem }),
  });
  let closing: Promise<void> | null = null;
  return {
    worker,
    workerId: opts.workerId,
    dataDir,
    sampler,
    close() {
      closing ??= worker.close().then(() => {
        if (ownsDir) removeTempDir(dataDir);
      });
      return closing;
    },
  };
}

/**
 * A directory of fake GPU device nodes, character devices 1:3 (like /dev/null) named as the real ones:
 * nvidia0..15, nvidiactl, nvidia-uvm, kfd and dri/renderD128..143. Needs root (mknod), as the sandbox
 * tests do.
 */
export async function makeFakeDevDir(dir: string): Promise<string> {
  const names = [
    ...Array.from({ length: 16 }, (_, i) => `nvidia${i}`),
    'nvidiactl',
    'nvidia-uvm',
    'kfd',
    ...Array.from({ length: 16 }, (_, i) => `dri/renderD${128 + i}`),
  ];
  mkdirSync(join(dir, 'dri'), { recursive: true, mode: 0o700 });
  for (const name of names) {
    const path = join(dir, name);
    if (!existsSync(path)) execFileSync('mknod', ['-m', '0666', path, 'c', '1', '3']);
  }
  return dir;
}

/** Starts a worker on a `TestMaster`, creating its worker token there. */
export function startWorkerOn(
  m: TestMaster,
  workerId: string,
  opts: Partial<Omit<TestWorkerOptions, 'token' | 'workerId'>> = {},
): Promise<TestWorker> {
  return startTestWorker({
    url: m.url,
    caPem: m.caPem,
    token: m.createToken(`worker-${workerId}`, ['worker'], workerId),
    workerId,
    ...opts,
  });
}

/** The data dir of a worker, for opening its local store (`worker.sqlite`). */
export function workerStorePath(dataDir: string): string {
  return join(dataDir, 'worker.sqlite');
}
