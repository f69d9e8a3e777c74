import { readdirSync } from 'node:fs';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { createCaTrustingFetch } from '../src/platform/tls.js';
import { type ChildMaster, startChildMaster } from './child-master.js';
import { type ChildWorker, startChildWorker } from './child-worker.js';
import { BenchClients, keySequence, waitForCards } from './harness.js';
import { CHILD_FLOODS, startChildFlood } from './noisy-flood-child.js';
import {
  diffRevisionBytes,
  FLOODS,
  type FloodContext,
  type FloodSizes,
  floodLabel,
  prepareDiffRevision,
  type ScenarioName,
} from './noisy-floods.js';
import { resultRows, type ScenarioResult, summaryTable } from './noisy-report.js';
import { prepareToolFloods } from './noisy-tool-floods.js';
import { type Neighbours, runSecondAgent, runSecondTasks } from './noisy-victims.js';
import type { BenchSection, OpResult } from './stats.js';

/**
 * Noisy neighbours (issue 21): how much one noisy participant slows everyone else. One master in its own
 * process (`gpu-broker serve`), one local worker in its own process (`gpu-broker worker --gpus sim:2`,
 * sandboxed with bubblewrap), on loopback. In each scenario a flood runs for the window (noisy-floods.ts)
 * while a second agent makes a steady mix of cheap calls and a second task (one-card `/bin/true`) is
 * submitted and approved again and again (noisy-victims.ts); the table gives their p50/p99 and times to
 * `started`/`finished` against the idle scenario, and the master's RSS and file descriptors at their
 * peak. Run alone: `node dist/bench/run.js --only noisy`.
 *
 * Sizes (environment variables, defaults in brackets):
 *   NOISY_SCENARIOS        which scenarios, in the order given [noisy: idle,uploads,diffs,slow,logs;
 *                          noisy-tools: idle,explain,grants,longpolls]
 *   NOISY_SECONDS          measured window of each scenario [15]
 *   NOISY_PAUSE_MS         the second agent's (and second task's) pause between calls [50]
 *   NOISY_CALL_TIMEOUT_S   a second-agent call slower than this fails, counted at the limit [30]
 *   NOISY_TASK_TIMEOUT_S   a second task not COMPLETED by then is cancelled, counted at the limit [20]
 *   NOISY_LOG_MIB          stdout of the log-flood task [256]
 *   NOISY_UPLOADS          concurrent uploads of the upload flood [16]
 *   NOISY_UPLOAD_MIB       size of the right-digest uploads; the input quota is set below it [32]
 *   NOISY_WRONG_UPLOAD_MIB size of the wrong-digest uploads [a fifth of the quota: four of them, the
 *                          per-principal cap of uploads in flight, fit it, so they are streamed and
 *                          hashed whole; NOISY_UPLOAD_MIB gives the old flood, all refused on size]
 *   NOISY_DIFF_FILES       modified files of the diff-flood revision [1000]
 *   NOISY_DIFF_LINES       lines per file (the LCS of each is lines² cells) [300]
 *   NOISY_DIFF_READERS     concurrent get_revision loops [1]
 *   NOISY_SLOW_CONNS       slow-body connections [1000]
 *   NOISY_EXPLAIN_MIB, NOISY_EXPLAIN_PATHS, NOISY_EXPLAIN_CLIENTS   the explain_grant flood [12, 1500, 4]
 *   NOISY_GRANT_KIB, NOISY_GRANT_CLIENTS                            the request_grant flood [600, 4]
 *   NOISY_LONG_POLLS       long-polls the flooder holds from the neighbours' address [600]
 *   NOISY_MASTER_NOFILE    the master's RLIMIT_NOFILE (soft and hard), 0: the bench's own [0]
 *   NOISY_FLOOD_ADDRESS    the local address the uploads and slow bodies connect from [127.0.0.2]
 *   NOISY_SETTLE_S         most seconds to wait after a flood for prompt answers again [30]
 *   NOISY_FLOOD_PROCESS    child: the upload, diff and slow-body floods run in their own process at
 *                          nice 19, standing in for a client on another host (noisy-flood-child.ts);
 *                          inline: in the bench's own event loop, at its priority (the old mode) [child]
 */

const MIB = 1024 * 1024;

/** A non-negative number from the environment, or `fallback`. */
function num(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name}=${raw}: expected a non-negative number`);
  return n;
}

interface NoisyConfig {
  scenarios: ScenarioName[];
  seconds: number;
  pauseMs: number;
  callTimeoutMs: number;
  taskTimeoutMs: number;
  diffFiles: number;
  diffLines: number;
  masterNofile: number;
  settleMs: number;
  floodAddress: string;
  floodProcess: FloodProcess;
  sizes: FloodSizes;
}

/** Where the flooding client runs (see NOISY_FLOOD_PROCESS). */
type FloodProcess = 'child' | 'inline';

function floodProcess(): FloodProcess {
  const raw = process.env['NOISY_FLOOD_PROCESS'] || 'child';
  if (raw !== 'child' && raw !== 'inline')
    throw new Error(`NOISY_FLOOD_PROCESS=${raw}: expected child or inline`);
  return raw;
}

/** The scenarios of each section, in the order they run. */
const SECTION_SCENARIOS = {
  noisy: ['idle', 'uploads', 'diffs', 'slow', 'logs'],
  'noisy-tools': ['idle', 'explain', 'grants', 'longpolls'],
} as const satisfies Record<string, readonly ScenarioName[]>;

function readConfig(section: keyof typeof SECTION_SCENARIOS): NoisyConfig {
  const names = (process.env['NOISY_SCENARIOS'] ?? SECTION_SCENARIOS[section].join(','))
    .split(',')
    .filter(Boolean);
  for (const n of names)
    if (!(n in FLOODS))
      throw new Error(`NOISY_SCENARIOS: no scenario ${n}; known: ${Object.keys(FLOODS).join(', ')}`);
  return {
    scenarios: names as ScenarioName[],
    seconds: num('NOISY_SECONDS', 15),
    pauseMs: num('NOISY_PAUSE_MS', 50),
    callTimeoutMs: num('NOISY_CALL_TIMEOUT_S', 30) * 1000,
    taskTimeoutMs: num('NOISY_TASK_TIMEOUT_S', 20) * 1000,
    diffFiles: num('NOISY_DIFF_FILES', 1000),
    diffLines: num('NOISY_DIFF_LINES', 300),
    masterNofile: num('NOISY_MASTER_NOFILE', 0),
    settleMs: num('NOISY_SETTLE_S', 30) * 1000,
    floodAddress: process.env['NOISY_FLOOD_ADDRESS'] || '127.0.0.2',
    floodProcess: floodProcess(),
    sizes: {
      logMiB: num('NOISY_LOG_MIB', 256),
      uploads: num('NOISY_UPLOADS', 16),
      uploadMiB: num('NOISY_UPLOAD_MIB', 32),
      wrongUploadMiB: num('NOISY_WRONG_UPLOAD_MIB', Number.NaN),
      diffReaders: num('NOISY_DIFF_READERS', 1),
      slowConnections: num('NOISY_SLOW_CONNS', 1000),
      tools: {
        explainMiB: num('NOISY_EXPLAIN_MIB', 12),
        explainPaths: num('NOISY_EXPLAIN_PATHS', 1500),
        explainClients: num('NOISY_EXPLAIN_CLIENTS', 4),
        grantKiB: num('NOISY_GRANT_KIB', 600),
        grantClients: num('NOISY_GRANT_CLIENTS', 4),
        longPolls: num('NOISY_LONG_POLLS', 600),
      },
    },
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Peaks of the master's RSS and open files and the worker's RSS, sampled every 200 ms until stopped. */
function samplePeaks(master: ChildMaster, worker: ChildWorker) {
  const peak = {
    masterRssStartMiB: Number.NaN,
    masterRssMiB: 0,
    masterFds: 0,
    workerRssMiB: 0,
    masterGone: false,
  };
  const sample = () => {
    try {
      peak.masterRssMiB = Math.max(peak.masterRssMiB, master.memory().rssMiB);
      peak.masterFds = Math.max(peak.masterFds, readdirSync(`/proc/${master.pid}/fd`).length);
    } catch {
      peak.masterGone = true;
    }
    const w = worker.rssMiB();
    if (!Number.isNaN(w)) peak.workerRssMiB = Math.max(peak.workerRssMiB, w);
  };
  sample();
  peak.masterRssStartMiB = peak.masterRssMiB;
  const timer = setInterval(sample, 200);
  return {
    stop() {
      clearInterval(timer);
      sample();
      return peak;
    },
  };
}

/**
 * Waits until three get_status calls in a row answer within `boundMs` (at most `maxMs`), so one
 * flood's tail does not land in the next scenario; returns the seconds it took.
 */
async function settle(
  agent: Client,
  boundMs: number,
  maxMs: number,
): Promise<{ settleSeconds: number; settleLimited: boolean }> {
  const t0 = performance.now();
  let good = 0;
  while (good < 3 && performance.now() - t0 < maxMs) {
    const s = performance.now();
    const ok = await agent
      .callTool({ name: 'get_status', arguments: {} }, undefined, { timeout: maxMs })
      .then((r) => !r.isError)
      .catch(() => false);
    good = ok && performance.now() - s < boundMs ? good + 1 : 0;
    await sleep(ok ? 50 : 500);
  }
  return { settleSeconds: (performance.now() - t0) / 1000, settleLimited: good < 3 };
}

/** Runs one scenario: the flood, the neighbours over the window, the flood's end, the settling. */
async function runScenario(
  name: ScenarioName,
  cfg: NoisyConfig,
  ctx: FloodContext & { diffReaderToken: string },
  n: Neighbours,
  master: ChildMaster,
  worker: ChildWorker,
  settleBoundMs: number,
  last: boolean,
): Promise<ScenarioResult> {
  const inChild = cfg.floodProcess === 'child' && CHILD_FLOODS.has(name);
  const base = {
    name,
    flood: floodLabel(name, cfg.sizes),
    floodProcess: name === 'idle' ? '–' : inChild ? 'child, nice 19' : 'inline',
    agent: null,
    tasks: null,
    masterRssStartMiB: Number.NaN,
    masterRssMiB: Number.NaN,
    masterFds: 0,
    workerRssMiB: Number.NaN,
    workerDiskMiB: worker.diskMiB(),
    settleSeconds: 0,
    settleLimited: false,
  };
  const started = performance.now();
  let flood: Awaited<ReturnType<(typeof FLOODS)[ScenarioName]>>;
  try {
    flood = inChild
      ? await startChildFlood({
          name,
          target: ctx.target,
          flooderToken: ctx.flooderToken,
          diffReaderToken: ctx.diffReaderToken,
          diff: ctx.diff,
          sizes: ctx.sizes,
          keyPrefix: `noisy-flood-${process.pid}-${name}`,
          neighbourTarget: ctx.neighbourTarget,
          tools: ctx.tools,
        })
      : await FLOODS[name](ctx);
  } catch (err) {
    return {
      ...base,
      seconds: 0,
      floodNotes: 'the flood did not start',
      error: String((err as Error).message),
    };
  }
  const peaks = samplePeaks(master, worker);
  const until = performance.now() + cfg.seconds * 1000;
  // The flood ends with the window; calls the neighbours started in it are measured to their end.
  let workerDiskMiB = Number.NaN;
  const floodEnded = sleep(cfg.seconds * 1000).then(() => {
    workerDiskMiB = worker.diskMiB();
    return flood.stop().catch((err: unknown) => `stopping the flood failed: ${String(err)}`);
  });
  const [agent, tasks, floodNotes] = await Promise.all([
    runSecondAgent(n, until),
    runSecondTasks(n, until),
    floodEnded,
  ]);
  const seconds = (performance.now() - started) / 1000;
  const p = peaks.stop();
  // After the last scenario nothing is left to spoil: the master is stopped next.
  const settled = last
    ? { settleSeconds: 0, settleLimited: false }
    : await settle(n.agent, settleBoundMs, cfg.settleMs);
  return {
    ...base,
    seconds,
    agent,
    tasks,
    masterRssStartMiB: p.masterRssStartMiB,
    masterRssMiB: p.masterRssMiB,
    masterFds: p.masterFds,
    workerRssMiB: p.workerRssMiB,
    workerDiskMiB,
    floodNotes,
    ...settled,
    ...(p.masterGone ? { error: 'the master process was gone during the window' } : {}),
  };
}

async function runNoisy(section: keyof typeof SECTION_SCENARIOS): Promise<OpResult[]> {
  const cfg = readConfig(section);
  const diffBytes = diffRevisionBytes(cfg.diffFiles, cfg.diffLines);
  // The flooder's uploads with the right digest must be over the quota on their own; the only other
  // uploader is the diff revisions' owner.
  const quota = Math.max(2 * diffBytes + 8 * MIB, 16 * MIB);
  if (cfg.sizes.uploadMiB * MIB <= quota)
    console.log(`note: NOISY_UPLOAD_MIB ≤ the quota (${(quota / MIB).toFixed(0)} MiB): uploads fit`);
  if (Number.isNaN(cfg.sizes.wrongUploadMiB))
    cfg.sizes.wrongUploadMiB = Math.max(1, Math.floor(quota / MIB / 5));
  const master = await startChildMaster(
    {
      executables: [{ path: '/bin/true' }, { path: '/bin/sh' }],
      max_input_bytes: Math.max(256 * MIB, Math.ceil(cfg.sizes.uploadMiB * MIB), diffBytes),
      max_input_files: Math.min(10_000, Math.max(1000, cfg.diffFiles)),
      input_quota_bytes: quota,
    },
    cfg.masterNofile > 0 ? { nofile: cfg.masterNofile } : {},
  );
  const trusting = createCaTrustingFetch(master.caPem);
  const clients = new BenchClients(master.url, trusting.fetch, 'bench-noisy');
  let worker: ChildWorker | null = null;
  try {
    const agentToken = await master.createToken('noisy-agent', ['submitter']);
    const flooderToken = await master.createToken('noisy-flooder', ['submitter']);
    const reviewer = await clients.connect(await master.createToken('noisy-reviewer', ['reviewer']));
    const diffReaderToken = await master.createToken('noisy-diff-reader', ['reviewer']);
    const diffReader = await clients.connect(diffReaderToken);
    const diffOwner = await clients.connect(await master.createToken('noisy-diff-owner', ['submitter']));
    const agent = await clients.connect(agentToken);
    const owner = await clients.connect(agentToken);
    const flooder = await clients.connect(flooderToken);
    worker = await startChildWorker(master, 'noisy-worker', 2);
    await waitForCards(
      agent,
      (cards) => cards.filter((c) => c.state === 'AVAILABLE').length === 2,
      30_000,
      'the bench worker never became available',
    );
    const nextKey = keySequence(`noisy-${process.pid}`);
    const t0 = performance.now();
    const diff = cfg.scenarios.includes('diffs')
      ? await prepareDiffRevision(diffOwner, diffReader, cfg.diffFiles, cfg.diffLines, nextKey)
      : null;
    if (diff)
      console.log(
        `prepared a revision with ${cfg.diffFiles} modified files of ${cfg.diffLines} lines in ` +
          `${((performance.now() - t0) / 1000).toFixed(1)} s`,
      );
    const target = { url: master.url, caPem: master.caPem };
    const tools = await prepareToolFloods(
      new Set(cfg.scenarios),
      flooder,
      reviewer,
      cfg.sizes.tools,
      nextKey,
    );
    // The byte floods (uploads, slow bodies) connect from 127.0.0.2, the neighbours from 127.0.0.1:
    // two peers, as a per-peer connection cap would see two hosts.
    const ctx: FloodContext & { diffReaderToken: string } = {
      target: { ...target, localAddress: cfg.floodAddress },
      flooderToken,
      flooder,
      reviewer,
      diffReader,
      diffReaderToken,
      diff,
      sizes: cfg.sizes,
      nextKey,
      neighbourTarget: target,
      tools,
      dataDir: master.dataDir,
    };
    const n: Neighbours = {
      target,
      agent,
      agentToken,
      owner,
      reviewer,
      pauseMs: cfg.pauseMs,
      callTimeoutMs: cfg.callTimeoutMs,
      taskTimeoutMs: cfg.taskTimeoutMs,
      nextKey,
    };
    // Warm-up (not recorded): connections, JIT, the sandbox's first start.
    const warm = performance.now() + 2000;
    await Promise.all([runSecondAgent(n, warm), runSecondTasks(n, warm)]);
    const results: ScenarioResult[] = [];
    let settleBoundMs = 100;
    for (const [i, name] of cfg.scenarios.entries()) {
      const last = i === cfg.scenarios.length - 1;
      const r = await runScenario(name, cfg, ctx, n, master, worker, settleBoundMs, last);
      results.push(r);
      if (name === 'idle' && r.agent && r.agent.status.latencies.length > 0) {
        const sorted = [...r.agent.status.latencies].sort((a, b) => a - b);
        settleBoundMs = Math.max(100, 5 * (sorted[Math.floor(sorted.length / 2)] ?? 20));
      }
      console.log(`${name}: done in ${r.seconds.toFixed(1)} s (+${r.settleSeconds.toFixed(1)} s settling)`);
    }
    console.log(`\n${summaryTable(results)}\n`);
    return resultRows(results);
  } finally {
    await clients.close();
    await worker?.stop();
    await trusting.close();
    const stopped = master.stop();
    const timer = setTimeout(() => {
      try {
        process.kill(master.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }, 20_000);
    await stopped;
    clearTimeout(timer);
  }
}

/** The noisy-neighbour section of `npm run bench`. */
export const noisySection: BenchSection = {
  name: 'noisy',
  description:
    'a second agent and a second task, idle vs under floods of logs, uploads, diffs and slow connections (issue 21)',
  run: () => runNoisy('noisy'),
};

/**
 * The tool floods of issue 35, item 7 (noisy-tool-floods.ts): explain_grant with a heavy spec,
 * request_grant with big scopes, 600 long-polls of one principal from the neighbours' own address; the
 * same neighbours and the same table against an idle window of the same run.
 */
export const noisyToolsSection: BenchSection = {
  name: 'noisy-tools',
  description:
    'a second agent and a second task, idle vs one principal flooding explain_grant, request_grant and long-polls (issue 35)',
  run: () => runNoisy('noisy-tools'),
};
