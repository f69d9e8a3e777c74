/**
 * The sbatch command line for a submit request, checked before anything runs: names, comments and
 * partitions from a safe alphabet, absolute paths without `%` or newlines, counts in range, and operator
 * extra arguments that do not set an option the driver owns (their precedence over the driver's would be
 * ambiguous). Pure.
 *
 * The job's environment is `--export=ALL` of sbatch's own, which the driver fixes (driver.ts): nothing of
 * a spec travels through sbatch (the task's env is a file of the job dir, job-wrapper.ts), and NONE is
 * not used because Slurm 22.05 then loads the job user's login environment on the node (`su -`).
 */
import { SlurmRequestError } from './errors.js';
import { formatSlurmTimeLimit } from './parse.js';
import type { SlurmSubmitRequest } from './types.js';

/** Names and comments the broker sets: printable, no whitespace, no `=`-confusion issues in `-o` output. */
const MARKER = /^[A-Za-z0-9._:@%+-]{1,200}$/;
/** A GRES type (`1g.10gb`, `nvidia_a100_80gb_pcie_1g.10gb`, `h100`): no `:`, `,` or whitespace. */
/** A GRES type sbatch is given: Slurm's own characters, nothing that could end the option. */
export const GRES_TYPE = /^[A-Za-z0-9._+-]{1,64}$/;
/** sbatch options the driver sets itself: an operator's extra arg may not set them (ambiguous precedence). */
const RESERVED_OPTIONS = [
  '--export',
  '--output',
  '--error',
  '--chdir',
  '--job-name',
  '--comment',
  '--parsable',
  '--wrap',
  '--gres',
  '--gpus',
  '--gpus-per-node',
  '--gpus-per-task',
  '--gpus-per-socket',
  '--ntasks',
  '--array',
  '--nodes',
  '--ntasks-per-node',
  '--time',
  '--partition',
  '--account',
  '--qos',
  '--export-file',
  '--get-user-env',
  '--mem',
  '--mem-per-cpu',
  '--mem-per-gpu',
];
const RESERVED_SHORT = ['-o', '-e', '-D', '-J', '-N', '-t', '-p', '-A', '-q', '-G', '-W', '-H', '-n', '-a'];

/**
 * sbatch arguments for a request; throws SlurmRequestError on bad input before anything runs. Exported
 * for unit tests.
 */
export function buildSbatchArgs(req: SlurmSubmitRequest): { args: string[] } {
  checkMarker('jobName', req.jobName);
  checkMarker('comment', req.comment);
  for (const [k, v] of [
    ['partition', req.partition],
    ['account', req.account],
    ['qos', req.qos],
  ] as const)
    if (v !== undefined) checkMarker(k, v);
  for (const [k, p] of [
    ['scriptPath', req.scriptPath],
    ['stdout', req.stdout],
    ['stderr', req.stderr],
    ['chdir', req.chdir],
  ] as const)
    checkPath(k, p);
  const gpus = req.gpusPerNode ?? 0;
  const nodes = req.nodes ?? 1;
  const tasks = req.ntasksPerNode ?? 1;
  checkCount('gpusPerNode', gpus, 0);
  checkCount('nodes', nodes, 1);
  checkCount('ntasksPerNode', tasks, 1);
  for (const a of req.extraArgs ?? []) checkExtraArg(a);
  const args = [...(req.extraArgs ?? []), '--parsable'];
  if (req.partition !== undefined) args.push(`--partition=${req.partition}`);
  if (req.account !== undefined) args.push(`--account=${req.account}`);
  if (req.qos !== undefined) args.push(`--qos=${req.qos}`);
  args.push(
    `--job-name=${req.jobName}`,
    `--comment=${req.comment}`,
    `--nodes=${nodes}`,
    `--ntasks-per-node=${tasks}`,
  );
  if (gpus > 0) args.push(`--gres=${gresValue(req, gpus)}`);
  if (req.memoryMibPerNode !== undefined) {
    checkCount('memoryMibPerNode', req.memoryMibPerNode, 1);
    args.push(`--mem=${req.memoryMibPerNode}M`);
  }
  if (req.cpusPerTask !== undefined) {
    checkCount('cpusPerTask', req.cpusPerTask, 1);
    args.push(`--cpus-per-task=${req.cpusPerTask}`);
  }
  if (req.timeLimitSeconds !== undefined) {
    if (!Number.isFinite(req.timeLimitSeconds) || req.timeLimitSeconds <= 0)
      throw new SlurmRequestError(`timeLimitSeconds must be > 0, got ${req.timeLimitSeconds}`);
    args.push(`--time=${formatSlurmTimeLimit(req.timeLimitSeconds)}`);
  }
  args.push(
    `--output=${req.stdout}`,
    `--error=${req.stderr}`,
    `--chdir=${req.chdir}`,
    '--export=ALL',
    req.scriptPath,
  );
  return { args };
}

/** Throws unless `v` is a name the broker may pass to Slurm (no whitespace, `=`-safe). */
export function checkMarker(what: string, v: string): void {
  if (!MARKER.test(v))
    throw new SlurmRequestError(`bad ${what} '${v}': use [A-Za-z0-9._:@%+-], 1-200 characters`);
}

function checkPath(what: string, p: string): void {
  // `%` is sbatch's filename pattern character (%j …); the broker's paths never need it.
  if (!p.startsWith('/') || /[\0\n\r%]/.test(p) || p.length > 4096)
    throw new SlurmRequestError(`bad ${what} '${p}': an absolute path without %, NUL or newlines`);
}

function checkCount(what: string, n: number, min: number): void {
  if (!Number.isInteger(n) || n < min || n > (what === 'memoryMibPerNode' ? 2 ** 34 : 100_000))
    throw new SlurmRequestError(`bad ${what} ${n}`);
}

function checkExtraArg(a: string): void {
  if (!a.startsWith('-') || /[\0\n\r]/.test(a))
    throw new SlurmRequestError(`extra sbatch argument '${a}' must be one --option[=value] word`);
  const name = a.split('=')[0] as string;
  if (
    RESERVED_OPTIONS.some(
      (o) => name === o || (o.length > 3 && name.length >= 3 && o.startsWith(name) && name.startsWith('--')),
    )
  )
    throw new SlurmRequestError(`extra sbatch argument '${a}' sets an option the driver owns`);
  if (!name.startsWith('--') && RESERVED_SHORT.some((o) => a.startsWith(o)))
    throw new SlurmRequestError(`extra sbatch argument '${a}' sets an option the driver owns`);
}

/** `--gres`'s value: untyped `gpu:N`, one type `gpu:<type>:N`, or several `gpu:<a>:n,gpu:<b>:m` summing to N. */
function gresValue(req: Pick<SlurmSubmitRequest, 'gpuType' | 'gpuTypes'>, gpus: number): string {
  const badType = (type: string) =>
    new SlurmRequestError(`bad GRES type '${type}': use [A-Za-z0-9._-], 1-64 characters`);
  if (req.gpuTypes !== undefined) {
    if (req.gpuType !== undefined) throw new SlurmRequestError('give gpuType or gpuTypes, not both');
    let sum = 0;
    for (const { type, count } of req.gpuTypes) {
      if (!GRES_TYPE.test(type)) throw badType(type);
      checkCount('gpuTypes count', count, 1);
      sum += count;
    }
    if (sum !== gpus || new Set(req.gpuTypes.map((t) => t.type)).size !== req.gpuTypes.length)
      throw new SlurmRequestError(`gpuTypes must name distinct types whose counts sum to ${gpus}`);
    return req.gpuTypes.map(({ type, count }) => `gpu:${type}:${count}`).join(',');
  }
  if (req.gpuType === undefined) return `gpu:${gpus}`;
  if (!GRES_TYPE.test(req.gpuType)) throw badType(req.gpuType);
  return `gpu:${req.gpuType}:${gpus}`;
}
