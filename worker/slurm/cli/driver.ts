/**
 * A typed driver over the Slurm command line (sbatch, scontrol, scancel, sacct). It knows Slurm, not the
 * broker: the worker's Slurm backend calls it to list nodes and GPU holders, submit a wrapped job, read
 * a job's state and binding, and cancel.
 *
 * Commands (docs/security.md "Code the reviewer did not read"): sbatch, scontrol, scancel, sacct and srun are resolved to absolute paths once, when
 * the driver is made (at worker start), on the operator's PATH (or `binDir`); each then runs through
 * execFile (no shell) with a timeout and a fixed environment, SLURM_COMMAND_ENV: PATH (system dirs),
 * LANG=C, TZ=UTC and SLURM_TIME_FORMAT=standard (timestamps parse the same everywhere), plus SLURM_CONF
 * when the operator's environment sets it — nothing else. A spec's env never reaches a command, and the
 * worker's own SBATCH_* / SLURM_* variables are never read (they would change options behind the
 * operator's back: fixed options go in `--slurm-extra-arg`). The job's environment is that one too
 * (`--export=ALL`, sbatch-args.ts). A failure is a SlurmCommandError carrying the command's stderr.
 *
 * A job that scontrol does not know is `null` from {@link SlurmDriver.job}. slurmctld forgets ended
 * jobs MinJobAge seconds (300 by default) after they end, so `null` for a job the caller submitted
 * means "ended and forgotten" or "never reached slurmctld's state" (a lost controller state);
 * {@link SlurmDriver.lookupEnded} then looks for the final record in the jobcomp/filetxt log (when
 * JobCompType=jobcomp/filetxt and JobCompLoc is readable from this host) or in sacct (when accounting
 * is configured), and otherwise answers `lost`. Whether an id was ever submitted is the caller's record,
 * not Slurm's: ids are reused only after MaxJobId wraps.
 */
import { execFile } from 'node:child_process';
import { readFile, stat } from 'node:fs/promises';
import { delimiter, dirname, isAbsolute, join } from 'node:path';
import { findOnPath } from '../../../src/platform/find-on-path.js';
import { SlurmCommandError, SlurmRequestError } from './errors.js';
import { findJobcompRecord, parseConfig, safeExpand } from './jobcomp.js';
import {
  isEndedState,
  parseExitCode,
  parseJobLine,
  parseJobState,
  parseNodeLine,
  parseSlurmTime,
} from './parse.js';
import { buildSbatchArgs, checkMarker } from './sbatch-args.js';
import type {
  SlurmEndedJob,
  SlurmEndedLookup,
  SlurmGpuHolder,
  SlurmJob,
  SlurmNode,
  SlurmSubmitRequest,
} from './types.js';

// Moved to their own modules; re-exported so that imports of the first version keep working.
export { buildSbatchArgs } from './sbatch-args.js';

/** The search path every Slurm command (and the job's scripts) runs with. */
export const SLURM_COMMAND_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** The Slurm commands the driver runs or the job wrapper embeds. */
export type SlurmCommand = 'sbatch' | 'scontrol' | 'scancel' | 'sacct' | 'srun';
const COMMANDS: readonly SlurmCommand[] = ['sbatch', 'scontrol', 'scancel', 'sacct', 'srun'];

/**
 * The whole environment of a Slurm command: fixed, plus the operator's SLURM_CONF (the one variable a
 * site's worker may need to find its cluster). Pure.
 */
export function slurmCommandEnv(
  operatorEnv: Readonly<Record<string, string | undefined>>,
): Record<string, string> {
  const env: Record<string, string> = {
    PATH: SLURM_COMMAND_PATH,
    LANG: 'C',
    TZ: 'UTC',
    SLURM_TIME_FORMAT: 'standard',
  };
  const conf = operatorEnv['SLURM_CONF'];
  if (conf !== undefined && isAbsolute(conf)) env['SLURM_CONF'] = conf;
  return env;
}

/** Options of {@link SlurmDriver}. */
export interface SlurmDriverOptions {
  /**
   * The operator's environment, read once: its PATH finds the commands (when `binDir` is absent) and its
   * SLURM_CONF is passed on; nothing else of it reaches a command. Default: process.env.
   */
  env?: Readonly<Record<string, string | undefined>>;
  /** Per-command timeout, default 30 s (slurmctld answers in ms; a hung controller must not hang us). */
  timeoutMs?: number;
  /** Directory of the Slurm binaries; default: found on the operator's PATH, then SLURM_COMMAND_PATH. */
  binDir?: string;
  /** Largest stdout accepted from one command, default 64 MiB. */
  maxOutputBytes?: number;
}

/** What {@link SlurmDriver.cancel} found. */
export type SlurmCancelResult =
  /** scancel accepted it (the job ends asynchronously: poll `job()` until an ended state). */
  | 'requested'
  /** The job already ended (or is completing). */
  | 'ended'
  /** slurmctld does not know the id. */
  | 'unknown';

const JOB_ID = /^\d+(?:_\d+)?(?:\+\d+)?$/;
const SIGNAL = /^(?:SIG)?[A-Z0-9]{2,10}$|^\d{1,2}$/;

/** The driver; one per worker. */
export class SlurmDriver {
  private readonly env: Record<string, string>;
  private readonly timeoutMs: number;
  private readonly paths: ReadonlyMap<SlurmCommand, string | null>;
  private readonly searched: string;
  private readonly maxOutputBytes: number;
  private configCache: Promise<Map<string, string>> | null = null;

  constructor(opts: SlurmDriverOptions = {}) {
    const operator = opts.env ?? process.env;
    this.env = slurmCommandEnv(operator);
    this.timeoutMs = opts.timeoutMs ?? 30_000;
    this.searched = opts.binDir ?? `${operator['PATH'] ?? ''}${delimiter}${SLURM_COMMAND_PATH}`;
    this.paths = new Map(COMMANDS.map((c) => [c, findOnPath(c, this.searched)]));
    this.maxOutputBytes = opts.maxOutputBytes ?? 64 * 1024 * 1024;
  }

  /**
   * Nodes of `partition` (all nodes when omitted) with their GPUs and who holds them. Used indices come
   * from `GresUsed=…(IDX:…)` when printed, else from the running jobs' `GRES=gpu:N(IDX:…)`.
   */
  async nodes(partition?: string): Promise<SlurmNode[]> {
    if (partition !== undefined) checkMarker('partition', partition);
    const [nodeOut, jobs] = await Promise.all([
      this.run('scontrol', ['show', 'node', '-d', '-o']),
      this.jobs(),
    ]);
    const holders = new Map<string, SlurmGpuHolder[]>();
    for (const job of jobs) {
      if (
        job.state !== 'RUNNING' &&
        job.state !== 'COMPLETING' &&
        job.state !== 'SUSPENDED' &&
        job.state !== 'CONFIGURING'
      )
        continue;
      for (const g of job.gpus) {
        if (g.indices.length === 0) continue;
        const list = holders.get(g.node) ?? [];
        list.push({ jobId: job.id, name: job.name, comment: job.comment, indices: g.indices });
        holders.set(g.node, list);
      }
    }
    const out: SlurmNode[] = [];
    for (const line of lines(nodeOut)) {
      if (!line.startsWith('NodeName=')) continue;
      const n = parseNodeLine(line);
      if (partition !== undefined && !n.partitions.includes(partition)) continue;
      const held = holders.get(n.name) ?? [];
      const fromJobs = [...new Set(held.flatMap((h) => h.indices))].sort((a, b) => a - b);
      out.push({ ...n, usedGpuIndices: n.usedGpuIndices ?? fromJobs, holders: held });
    }
    return out;
  }

  /** The absolute path a command was resolved to when the driver was made; null when not found. */
  commandPath(cmd: SlurmCommand): string | null {
    return this.paths.get(cmd) ?? null;
  }

  /** Submits a batch job; resolves to its id (`sbatch --parsable`, cluster suffix dropped). */
  async submit(req: SlurmSubmitRequest): Promise<string> {
    const { args } = buildSbatchArgs(req);
    const out = await this.run('sbatch', args);
    const id = out.trim().split('\n').pop()?.split(';')[0]?.trim() ?? '';
    if (!JOB_ID.test(id))
      throw new SlurmCommandError(
        ['sbatch', ...args],
        0,
        out,
        'output',
        `unexpected --parsable output '${out.trim()}'`,
      );
    return id;
  }

  /** One job, or null when slurmctld does not know it (see the module note). */
  async job(id: string): Promise<SlurmJob | null> {
    checkJobId(id);
    try {
      const out = await this.run('scontrol', ['show', 'job', '-d', '-o', id]);
      const line = lines(out).find((l) => l.startsWith(`JobId=${id} `) || l.startsWith('JobId='));
      return line ? parseJobLine(line) : null;
    } catch (err) {
      if (err instanceof SlurmCommandError && /Invalid job id specified/i.test(err.stderr)) return null;
      throw err;
    }
  }

  /** Jobs slurmctld knows (pending, running and recently ended), optionally of one partition. */
  async jobs(partition?: string): Promise<SlurmJob[]> {
    if (partition !== undefined) checkMarker('partition', partition);
    const out = await this.run('scontrol', ['show', 'job', '-d', '-o']);
    const jobs = lines(out)
      .filter((l) => l.startsWith('JobId='))
      .map(parseJobLine);
    return partition === undefined ? jobs : jobs.filter((j) => j.partition === partition);
  }

  /**
   * Cancels a job (`scancel ID`), or only signals it when `signal` is given: `scancel --signal=SIG ID`
   * signals the job's steps, not the batch shell — with the job wrapper that is the task (every rank),
   * while the wrapper and its srun keep running and write exit.json when the task ends. (`--full` would
   * also signal srun, which then kills the step with SIGKILL.)
   */
  async cancel(id: string, signal?: string): Promise<SlurmCancelResult> {
    checkJobId(id);
    if (signal !== undefined && !SIGNAL.test(signal)) throw new SlurmRequestError(`bad signal '${signal}'`);
    // scancel exits 0 and prints nothing for a job that already ended: ask first.
    const before = await this.job(id);
    if (before === null) return 'unknown';
    if (isEndedState(before.state)) return 'ended';
    const args = signal === undefined ? [id] : [`--signal=${signal}`, id];
    let stderr: string;
    try {
      stderr = (await this.runFull('scancel', args)).stderr;
    } catch (err) {
      if (!(err instanceof SlurmCommandError) || err.kind !== 'exit') throw err;
      stderr = err.stderr;
    }
    if (/Invalid job id specified/i.test(stderr)) return 'unknown';
    if (/already completing or completed|Job\/step already/i.test(stderr)) return 'ended';
    if (stderr.trim() !== '' && /error/i.test(stderr))
      throw new SlurmCommandError(['scancel', ...args], null, stderr, 'exit');
    return 'requested';
  }

  /** Expands a hostlist through `scontrol show hostnames` (Slurm's own parser). */
  async hostnames(expression: string): Promise<string[]> {
    if (expression.trim() === '') return [];
    const out = await this.run('scontrol', ['show', 'hostnames', expression]);
    return lines(out);
  }

  /**
   * The final record of a job slurmctld no longer knows: jobcomp/filetxt log, then sacct, else lost.
   * The jobcomp log is read only when it is on this host (JobCompLoc readable); its last 64 MiB are read.
   */
  async lookupEnded(id: string): Promise<SlurmEndedLookup> {
    checkJobId(id);
    const conf = await this.config();
    const tried: string[] = [];
    if (conf.get('JobCompType') === 'jobcomp/filetxt') {
      const loc = conf.get('JobCompLoc') ?? '';
      const rec = await findJobcompRecord(loc, id).catch(() => undefined);
      if (rec) return { kind: 'ended', source: 'jobcomp', job: rec };
      tried.push(rec === undefined ? `jobcomp log ${loc} unreadable` : `not in jobcomp log ${loc}`);
    } else tried.push(`no jobcomp/filetxt log (JobCompType=${conf.get('JobCompType') ?? '?'})`);
    const acct = conf.get('AccountingStorageType') ?? '';
    if (acct !== '' && acct !== 'accounting_storage/none') {
      const rec = await this.sacct(id).catch(() => null);
      if (rec) return { kind: 'ended', source: 'sacct', job: rec };
      tried.push('not in sacct');
    } else tried.push('no accounting (sacct unavailable)');
    return { kind: 'lost', detail: `job ${id} unknown to slurmctld; ${tried.join('; ')}` };
  }

  /** `scontrol show config` as a map (cached for the driver's life; reset with {@link forgetConfig}). */
  config(): Promise<Map<string, string>> {
    this.configCache ??= this.run('scontrol', ['show', 'config']).then(parseConfig);
    this.configCache.catch(() => {
      this.configCache = null;
    });
    return this.configCache;
  }

  /**
   * The operator's gres.conf, which Slurm keeps beside slurm.conf (scontrol's SLURM_CONF, else the
   * worker's SLURM_CONF, else /etc/slurm): its text, or null when it cannot be read or is over 1 MiB.
   * A site that keeps one gres.conf for all nodes (Slurm's advice for cloud nodes) lets the worker see
   * every node's typed GPUs and their files (gres.ts).
   */
  async gresConf(): Promise<string | null> {
    const conf = await this.config().then(
      (c) => c.get('SLURM_CONF'),
      () => undefined,
    );
    const slurmConf =
      conf !== undefined && isAbsolute(conf) ? conf : (this.env['SLURM_CONF'] ?? '/etc/slurm/slurm.conf');
    const path = join(dirname(slurmConf), 'gres.conf');
    try {
      if ((await stat(path)).size > 1024 * 1024) return null;
      return await readFile(path, 'utf8');
    } catch {
      return null;
    }
  }

  /** Drops the cached config (after an operator's `scontrol reconfigure`). */
  forgetConfig(): void {
    this.configCache = null;
  }

  private async sacct(id: string): Promise<SlurmEndedJob | null> {
    const out = await this.run('sacct', [
      '-n',
      '-P',
      '-X',
      '-j',
      id,
      '-o',
      'JobID,JobName,State,ExitCode,NodeList,Start,End',
    ]);
    const row = lines(out).find((l) => l.split('|')[0] === id);
    if (!row) return null;
    const [jid = '', name = '', state = '', exit = '', nodes = '', start = '', end = ''] = row.split('|');
    const ec = parseExitCode(exit);
    return {
      id: jid,
      name,
      state: parseJobState(state),
      rawState: state,
      exitCode: ec?.code ?? null,
      signal: ec?.signal ?? null,
      nodes: nodes === 'None assigned' ? [] : safeExpand(nodes),
      startTime: parseSlurmTime(start),
      endTime: parseSlurmTime(end),
    };
  }

  private async run(cmd: SlurmCommand, args: string[]): Promise<string> {
    return (await this.runFull(cmd, args)).stdout;
  }

  private runFull(cmd: SlurmCommand, args: string[]): Promise<{ stdout: string; stderr: string }> {
    const file = this.commandPath(cmd);
    if (file === null)
      return Promise.reject(
        new SlurmCommandError(
          [cmd, ...args],
          null,
          '',
          'spawn',
          `${cmd} was not found when the worker started (searched ${this.searched}): install Slurm's client commands or put their directory on the worker's PATH`,
        ),
      );
    const env = this.env;
    return new Promise((resolve, reject) => {
      execFile(
        file,
        args,
        {
          env,
          timeout: this.timeoutMs,
          killSignal: 'SIGKILL',
          maxBuffer: this.maxOutputBytes,
          encoding: 'utf8',
        },
        (err, stdout, stderr) => {
          if (!err) return resolve({ stdout, stderr });
          const e = err as NodeJS.ErrnoException & { killed?: boolean; code?: unknown };
          const argv = [cmd, ...args];
          if (typeof e.code === 'string')
            return reject(new SlurmCommandError(argv, null, stderr ?? '', 'spawn', e.message));
          if (e.killed)
            return reject(
              new SlurmCommandError(argv, null, stderr ?? '', 'timeout', `after ${this.timeoutMs} ms`),
            );
          reject(
            new SlurmCommandError(argv, typeof e.code === 'number' ? e.code : null, stderr ?? '', 'exit'),
          );
        },
      );
    });
  }
}

function checkJobId(id: string): void {
  if (!JOB_ID.test(id)) throw new SlurmRequestError(`bad Slurm job id '${id}'`);
}

function lines(out: string): string[] {
  return out.split('\n').filter((l) => l.trim() !== '');
}
