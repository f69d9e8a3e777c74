import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

/**
 * A master in its own process for benchmarks, started exactly as an operator would
 * (`gpu-broker serve --json`), so its RSS and CPU are its own and not the load generator's.
 */

const execFileP = promisify(execFile);

/** The built CLI next to this file once compiled (dist/bench → dist/src/cli/main.js). */
export const CLI_PATH = fileURLToPath(new URL('../src/cli/main.js', import.meta.url));

/** A running child master. */
export interface ChildMaster {
  url: string;
  caPem: string;
  pid: number;
  dataDir: string;
  /**
   * Creates a principal with the CLI (`token create --json`) and returns its token; a `worker` token
   * also takes the worker id it is bound to.
   */
  createToken(name: string, roles: string[], workerId?: string, account?: string): Promise<string>;
  /** Resident and peak resident set size of the master process, in MiB (from /proc/PID/status). */
  memory(): { rssMiB: number; peakMiB: number };
  /** CPU seconds (user + system) the master process has used so far (from /proc/PID/stat). */
  cpuSeconds(): number;
  /** SIGTERM, wait for exit, remove the data dir. */
  stop(): Promise<void>;
}

/**
 * Per-principal caps off (issue 21): the benches drive one token at thousands of proposals an hour to
 * measure throughput, which is what the caps exist to refuse.
 */
export const QUOTAS_OFF = {
  max_open_proposals: null,
  max_revisions_per_proposal: null,
  max_revisions_per_hour: null,
  max_revision_bytes: null,
};

/** How to start the child master beyond its policy. */
export interface ChildMasterOptions {
  /**
   * RLIMIT_NOFILE (soft and hard) the master starts with, e.g. 1024 to play a host that allows no
   * more; unset: inherited from the bench. Node raises its soft limit to the hard one at start, so
   * only the hard limit really bounds it.
   */
  nofile?: number;
  /**
   * The CLI to start (default CLI_PATH, this tree's): the e2e section starts an older build's
   * dist/src/cli/main.js to compare the two trees in one run.
   */
  cliPath?: string;
}

/** Starts `gpu-broker serve` on 127.0.0.1:0 (TLS auto) in a temp data dir with `policy`. */
export async function startChildMaster(
  policy: Record<string, unknown>,
  opts: ChildMasterOptions = {},
): Promise<ChildMaster> {
  const dataDir = mkdtempSync(join(tmpdir(), 'gpu-broker-bench-'));
  const configPath = join(dataDir, 'bench-config.json');
  writeFileSync(configPath, JSON.stringify({ policy, quotas: QUOTAS_OFF }));
  // GPU_BROKER_BENCH_MASTER_NODE_ARGS (e.g. "--cpu-prof") goes to the master's node only.
  const nodeArgs = (process.env['GPU_BROKER_BENCH_MASTER_NODE_ARGS'] ?? '').split(' ').filter(Boolean);
  const argv = [
    process.execPath,
    ...nodeArgs,
    opts.cliPath ?? CLI_PATH,
    'serve',
    '--data-dir',
    dataDir,
    '--listen',
    '127.0.0.1:0',
    '--json',
    '--config',
    configPath,
  ];
  // The shell sets the limit and execs node, so the pid stays the master's.
  const [command, ...args] =
    opts.nofile === undefined
      ? argv
      : ['/bin/sh', '-c', `ulimit -n ${Math.floor(opts.nofile)} && exec "$@"`, 'sh', ...argv];
  // The master's log (stderr, written synchronously) goes to a file, as to journald or a file on a
  // host: through a pipe the master blocked in write() whenever the busy bench process was slow to
  // read it (7 % of its time under the diff flood). GPU_BROKER_BENCH_MASTER_LOG=pipe keeps the pipe.
  const logToPipe = process.env['GPU_BROKER_BENCH_MASTER_LOG'] === 'pipe';
  const logPath = join(dataDir, 'master.log');
  const logFd = logToPipe ? null : openSync(logPath, 'a');
  const child: ChildProcess = spawn(command!, args, { stdio: ['ignore', 'pipe', logFd ?? 'pipe'] });
  if (logFd !== null) closeSync(logFd);
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  let piped = '';
  child.stderr?.setEncoding('utf8').on('data', (d: string) => {
    // Keep only the tail: the master logs JSON lines and we only need them on failure.
    piped = (piped + d).slice(-4000);
  });
  const logTail = () => {
    if (logToPipe) return piped;
    try {
      return readFileSync(logPath, 'utf8').slice(-4000);
    } catch {
      return '';
    }
  };
  const info = await new Promise<{ url: string; ca_file: string }>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`master did not start in 30 s: ${logTail()}`)), 30_000);
    void exited.then(() => reject(new Error(`master exited during start: ${logTail()}`)));
    child.stdout?.setEncoding('utf8').on('data', (d: string) => {
      out += d;
      const line = out.split('\n').find((l, i, all) => i < all.length - 1 && l.startsWith('{'));
      if (line) {
        clearTimeout(timer);
        resolve(JSON.parse(line) as { url: string; ca_file: string });
      }
    });
  });
  const pid = child.pid!;
  return {
    url: info.url,
    caPem: readFileSync(info.ca_file, 'utf8'),
    pid,
    dataDir,
    async createToken(name, roles, workerId, account) {
      const args = [
        opts.cliPath ?? CLI_PATH,
        'token',
        'create',
        '--data-dir',
        dataDir,
        '--name',
        name,
        '--json',
      ];
      for (const r of roles) args.push('--role', r);
      if (workerId) args.push('--worker-id', workerId);
      if (account) args.push('--account', account);
      const { stdout } = await execFileP(process.execPath, args);
      return (JSON.parse(stdout) as { token: string }).token;
    },
    memory() {
      const status = readFileSync(`/proc/${pid}/status`, 'utf8');
      const kib = (field: string) =>
        Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
      return { rssMiB: kib('VmRSS') / 1024, peakMiB: kib('VmHWM') / 1024 };
    },
    cpuSeconds() {
      // Fields 14 and 15 (utime, stime) in clock ticks; the command name (field 2) may hold spaces,
      // so count from the closing parenthesis. USER_HZ is 100 on Linux.
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      return (Number(rest[11]) + Number(rest[12])) / 100;
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
