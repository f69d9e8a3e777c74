import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmdirSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { requireOrSkip } from './require-or-skip.js';

/**
 * A real Slurm for tests (slurmctld + slurmd + munge from Debian's packages, fake GPUs), started by
 * scripts/slurm/start-local-slurm.sh and stopped by its pid files.
 *
 * - `ensureSlurm()`: the shared single-node cluster (node `localhost`, partition `gpu`, 8 fake GPUs,
 *   SLURM_CPUS=16, TEST_SLURM_CONF, /etc/slurm, /tmp/slurm-local). Idempotent: when `sinfo`
 *   answers and the node is usable it is reused (another run, or a developer, may have started it);
 *   otherwise it is started once per machine under a lock, with a marker naming this test run so that
 *   the globalSetup teardown (test/support/global-setup.ts) stops it at the end of the run — and only
 *   the run that started it does.
 * - `startMultiNodeSlurm()`: a second, separate cluster of two slurmd (`n1`, `n2`, 4 GPUs each) on this
 *   host, other ports and dirs; its test stops it in afterAll (and the teardown does as a backstop).
 *
 * Availability: without root (and no Slurm answering) or without the packages (apt not possible) the
 * result says why and tests skip with that reason — except under CI (CI=true), where it throws: CI must
 * run the Slurm tests, never skip them silently (the policy of every such skip: require-or-skip.ts).
 */

/** A Slurm the tests can use. */
export interface TestSlurm {
  /** Environment for Slurm clients and the driver (PATH, HOME, SLURM_CONF). */
  env: Record<string, string>;
  /** slurm.conf path. */
  conf: string;
  /** SLURM_LOCAL_DIR of the cluster (logs, jobcomp.log). */
  localDir: string;
  partition: string;
  nodes: string[];
  gpusPerNode: number;
  /** True when this call started it (false: reused). */
  startedHere: boolean;
}

/** Either a usable Slurm or why not. */
export type SlurmAvailability = { ok: true; slurm: TestSlurm } | { ok: false; reason: string };

const REPO = resolve(import.meta.dirname, '../..');
const START = join(REPO, 'scripts/slurm/start-local-slurm.sh');
const STOP = join(REPO, 'scripts/slurm/stop-local-slurm.sh');
const MAIN_DIR = '/tmp/slurm-local';
const MULTI_DIR = '/tmp/gpu-broker-slurm-multi';
const MARKER = 'started-by-test-run';
const LOCK = '/tmp/gpu-broker-slurm-start.lock';

/**
 * slurm.conf lines both test clusters get. `batch_sched_delay=0`: a batch job starts as soon as the
 * scheduler sees it, not up to 3 s later. `KillWait=2`: a job that outlives its SIGTERM (a cancel, a time
 * limit) is SIGKILLed after 2 s, not Slurm's default 30 s, so no test waits half a minute for a job to end;
 * nothing in the tests depends on the length of that grace, only on Slurm's state at the end.
 */
const TEST_SLURM_CONF = ['SchedulerParameters=batch_sched_delay=0', 'KillWait=2'].join('\n');

function runId(): string {
  return process.env.GPU_BROKER_TEST_RUN ?? `pid-${process.ppid}`;
}

function baseEnv(conf: string | null): Record<string, string> {
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    HOME: process.env.HOME ?? '/root',
  };
  if (conf !== null) env.SLURM_CONF = conf;
  return env;
}

/**
 * False when nothing listens where the config (SLURM_CONF, else /etc/slurm/slurm.conf) puts slurmctld:
 * with no controller, sinfo retries for about 9 s before it gives up, and every cluster start paid that.
 * True when it listens or the config cannot be read (then sinfo decides).
 */
function controllerListening(env: Record<string, string>): boolean {
  let conf: string;
  try {
    conf = readFileSync(env.SLURM_CONF ?? '/etc/slurm/slurm.conf', 'utf8');
  } catch {
    return true;
  }
  const host = /^\s*SlurmctldHost\s*=\s*([A-Za-z0-9._-]+)/m.exec(conf)?.[1] ?? 'localhost';
  const port = /^\s*SlurmctldPort\s*=\s*(\d+)/m.exec(conf)?.[1] ?? '6817';
  const r = spawnSync('bash', ['-c', `exec 3<>/dev/tcp/${host}/${port}`], {
    stdio: 'ignore',
    timeout: 5_000,
  });
  return r.status === 0 || r.error !== undefined;
}

/** Node states (sinfo %t) of a partition, or null when Slurm does not answer. */
function partitionStates(env: Record<string, string>, partition: string): string[] | null {
  if (!controllerListening(env)) return null;
  const r = spawnSync('sinfo', ['-h', '-N', '-p', partition, '-o', '%N %t'], {
    env,
    encoding: 'utf8',
    timeout: 10_000,
  });
  if (r.status !== 0 || r.error) return null;
  return r.stdout.split('\n').filter((l) => l.trim() !== '');
}

function usable(lines: string[] | null, nodes: number): boolean {
  if (lines === null || lines.length < nodes) return false;
  return lines.every((l) => /\s(idle|mix|mixed|alloc|allocated|comp|completing)$/.test(l.trim()));
}

function withLock<T>(fn: () => T): T {
  const deadline = Date.now() + 120_000;
  for (;;) {
    try {
      mkdirSync(LOCK);
      break;
    } catch {
      // stale lock of a crashed run
      try {
        if (Date.now() - statSync(LOCK).mtimeMs > 120_000) rmdirSync(LOCK);
      } catch {}
      if (Date.now() > deadline) throw new Error(`could not take ${LOCK} within 120 s`);
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200);
    }
  }
  try {
    return fn();
  } finally {
    rmdirSync(LOCK);
  }
}

function unavailable(reason: string): SlurmAvailability {
  requireOrSkip('a local Slurm', false, reason);
  return { ok: false, reason: `Slurm tests skipped: ${reason}` };
}

function startScript(env: Record<string, string>): { ok: boolean; output: string } {
  const r = spawnSync('bash', [START], {
    env: { ...process.env, ...env },
    encoding: 'utf8',
    timeout: 300_000,
  });
  return { ok: r.status === 0, output: `${r.stdout ?? ''}${r.stderr ?? ''}`.slice(-4000) };
}

function binariesPresent(): boolean {
  return ['slurmctld', 'slurmd', 'munged', 'sbatch'].every(
    (b) => spawnSync('sh', ['-c', `command -v ${b}`]).status === 0,
  );
}

/** The shared single-node Slurm: reused when it answers, else started (see the module note). */
export function ensureSlurm(): SlurmAvailability {
  const env = baseEnv(null);
  const slurm: TestSlurm = {
    env,
    conf: '/etc/slurm/slurm.conf',
    localDir: MAIN_DIR,
    partition: 'gpu',
    nodes: ['localhost'],
    gpusPerNode: 8,
    startedHere: false,
  };
  if (usable(partitionStates(env, 'gpu'), 1)) return { ok: true, slurm };
  if (process.getuid?.() !== 0) return unavailable('not root and no Slurm answering (sinfo -p gpu)');
  return withLock(() => {
    if (usable(partitionStates(env, 'gpu'), 1)) return { ok: true, slurm };
    const hadBinaries = binariesPresent();
    const r = startScript({
      SLURM_LOCAL_DIR: MAIN_DIR,
      SLURM_CPUS: '16',
      SLURM_EXTRA_CONF: TEST_SLURM_CONF,
      SLURM_INSTALL: '1',
    });
    if (!r.ok) {
      if (!hadBinaries && !binariesPresent())
        return unavailable(`Slurm packages missing and could not be installed:\n${r.output}`);
      throw new Error(`start-local-slurm.sh failed:\n${r.output}`);
    }
    writeFileSync(join(MAIN_DIR, MARKER), runId());
    return { ok: true, slurm: { ...slurm, startedHere: true } };
  });
}

/**
 * A second cluster with two nodes (`n1`, `n2`, 4 fake GPUs and 8 CPUs each) on this host, on ports
 * 6917 (slurmctld), 6918–6919 (slurmd), config in /tmp/gpu-broker-slurm-multi/etc. Ensures the main
 * cluster first so that munged belongs to it (stopping this one never stops munged).
 */
export function startMultiNodeSlurm(): SlurmAvailability {
  const main = ensureSlurm();
  if (!main.ok) return main;
  const conf = join(MULTI_DIR, 'etc/slurm.conf');
  const env = baseEnv(conf);
  const slurm: TestSlurm = {
    env,
    conf,
    localDir: MULTI_DIR,
    partition: 'gpu',
    nodes: ['n1', 'n2'],
    gpusPerNode: 4,
    startedHere: true,
  };
  return withLock(() => {
    if (usable(partitionStates(env, 'gpu'), 2)) return { ok: true, slurm: { ...slurm, startedHere: false } };
    const r = startScript({
      SLURM_LOCAL_DIR: MULTI_DIR,
      SLURM_CONF_DIR: join(MULTI_DIR, 'etc'),
      SLURM_NODE_NAMES: 'n1 n2',
      SLURMCTLD_PORT: '6917',
      SLURMD_PORT: '6918',
      SLURM_CPUS: '8',
      SLURM_FAKE_GPUS: '4',
      SLURM_EXTRA_CONF: TEST_SLURM_CONF,
      SLURM_INSTALL: '0',
    });
    if (!r.ok) throw new Error(`two-node start-local-slurm.sh failed:\n${r.output}`);
    writeFileSync(join(MULTI_DIR, MARKER), runId());
    return { ok: true, slurm };
  });
}

const MIG_DIR = '/tmp/gpu-broker-slurm-mig';

/** The MIG cluster's layout: a whole card and three slices of card 0 (minors per the driver, ADR 0046). */
export const MIG_SLURM_LAYOUT = {
  /** slurm.conf's Gres= of node `mig1` (the IDX order). */
  gres: 'gpu:h100:1,gpu:3g.40gb:1,gpu:1g.10gb:2',
  /** Capability minors per slice (GI access, CI access): 3g.40gb GI 1, 1g.10gb GI 2 and 3. */
  caps: {
    '3g.40gb': [[12, 13]],
    '1g.10gb': [
      [21, 22],
      [30, 31],
    ],
  } as Record<string, Array<[number, number]>>,
};

/**
 * A third cluster with one node `mig1` whose GPUs are typed GRES: one whole `h100` and three MIG slices
 * of card 0 (`3g.40gb`, two `1g.10gb`), declared in gres.conf with `MultipleFiles=` of stand-in device
 * nodes (`<dir>/migdev/nvidia0`, `nvidia1` as 195:N, `nvidia-caps/nvidia-cap<M>` as 1:3, 0666, like the
 * local worker's simulated cap nodes). Ports 7017/7018, config in /tmp/gpu-broker-slurm-mig/etc. Ensures
 * the main cluster first so that munged belongs to it (docs/slurm.md "MIG slices").
 */
export function startMigSlurm(): SlurmAvailability & { devDir?: string } {
  const main = ensureSlurm();
  if (!main.ok) return main;
  const conf = join(MIG_DIR, 'etc/slurm.conf');
  const env = baseEnv(conf);
  const devDir = join(MIG_DIR, 'migdev');
  const slurm: TestSlurm = {
    env,
    conf,
    localDir: MIG_DIR,
    partition: 'gpu',
    nodes: ['mig1'],
    gpusPerNode: 4,
    startedHere: true,
  };
  return withLock(() => {
    if (usable(partitionStates(env, 'gpu'), 1))
      return { ok: true, slurm: { ...slurm, startedHere: false }, devDir };
    mkdirSync(join(devDir, 'nvidia-caps'), { recursive: true });
    const cap = (m: number) => join(devDir, 'nvidia-caps', `nvidia-cap${m}`);
    const nodes: Array<[string, string, string]> = [
      [join(devDir, 'nvidia0'), '195', '0'],
      [join(devDir, 'nvidia1'), '195', '1'],
      ...Object.values(MIG_SLURM_LAYOUT.caps)
        .flat(2)
        .map((m): [string, string, string] => [cap(m), '1', '3']),
    ];
    for (const [path, major, minor] of nodes)
      if (!existsSync(path)) execFileSync('mknod', ['-m', '0666', path, 'c', major, minor]);
    const lines = ['AutoDetect=off', `NodeName=mig1 Name=gpu Type=h100 File=${join(devDir, 'nvidia1')}`];
    for (const [type, pairs] of Object.entries(MIG_SLURM_LAYOUT.caps))
      for (const [gi, ci] of pairs)
        lines.push(
          `NodeName=mig1 Name=gpu Type=${type} MultipleFiles=${join(devDir, 'nvidia0')},${cap(gi)},${cap(ci)}`,
        );
    const gresConf = join(MIG_DIR, 'gres.conf.in');
    writeFileSync(gresConf, `${lines.join('\n')}\n`);
    const r = startScript({
      SLURM_LOCAL_DIR: MIG_DIR,
      SLURM_CONF_DIR: join(MIG_DIR, 'etc'),
      SLURM_NODE_NAME: 'mig1',
      SLURMCTLD_PORT: '7017',
      SLURMD_PORT: '7018',
      SLURM_CPUS: '8',
      SLURM_NODE_GRES: MIG_SLURM_LAYOUT.gres,
      SLURM_GRES_CONF: gresConf,
      SLURM_EXTRA_CONF: TEST_SLURM_CONF,
      SLURM_INSTALL: '0',
    });
    if (!r.ok) throw new Error(`MIG start-local-slurm.sh failed:\n${r.output}`);
    writeFileSync(join(MIG_DIR, MARKER), runId());
    return { ok: true, slurm, devDir };
  });
}

/** Stops the MIG cluster if this test run started it. */
export function stopMigSlurm(): void {
  stopIfOurs(MIG_DIR);
}

/** Stops a cluster by its pid files (scripts/slurm/stop-local-slurm.sh). */
export function stopSlurm(localDir: string): void {
  execFileSync('bash', [STOP], { env: { ...process.env, SLURM_LOCAL_DIR: localDir }, stdio: 'ignore' });
}

/** Stops the multi-node cluster if this test run started it. */
export function stopMultiNodeSlurm(): void {
  stopIfOurs(MULTI_DIR);
}

/** Teardown: stops every cluster whose marker names this run (main first started here, multi-node). */
export function stopSlurmStartedByThisRun(): void {
  stopIfOurs(MIG_DIR);
  stopIfOurs(MULTI_DIR);
  stopIfOurs(MAIN_DIR);
}

function stopIfOurs(dir: string): void {
  const marker = join(dir, MARKER);
  if (!existsSync(marker)) return;
  if (readFileSync(marker, 'utf8').trim() !== runId()) return;
  stopSlurm(dir);
  writeFileSync(marker, '');
}
