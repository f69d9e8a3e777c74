/**
 * The batch script a Slurm job runs, and the files it leaves in its job directory:
 *
 *   <jobDir>/job.sh        this script (0700; the directory is 0700)
 *   <jobDir>/rank.sh       what every rank runs (rank-script.ts): the task, sandboxed or not
 *   <jobDir>/task.env      the task's environment (0600, NUL-separated NAME=VALUE), read only by rank.sh
 *   <jobDir>/stdout.log    sbatch --output (the task's stdout, all ranks; capped, see below)
 *   <jobDir>/stderr.log    sbatch --error (likewise)
 *   <jobDir>/stdout.fifo, stderr.fifo  while the task's step runs: its output on the way to the cap
 *   <jobDir>/binding.json  written atomically (tmp + rename) when the job starts, before the task
 *   <jobDir>/exit.json     written atomically when the task's srun step returns
 *   <jobDir>/sandbox-started.<rank> "started", written from inside the sandbox just before the task
 *   <jobDir>/setup-error.<rank>      why a rank could not set up its sandbox (the task never ran there)
 *
 * Environment (docs/security.md "Code the reviewer did not read"): sbatch runs with the driver's fixed environment and `--export=ALL` (driver.ts),
 * so the batch step has that, Slurm's own variables and nothing of the spec (Slurm 22.05's NONE would
 * run the job user's login shell on the node to load its login environment). job.sh is started by
 * `bash --noprofile --norc` and at once re-executes itself under `env -i` with only Slurm's variables,
 * a fixed PATH and LANG=C; every srun step inherits exactly that. The task's own environment is in
 * task.env, and only rank.sh's final `env -i` (inside the sandbox when there is one) applies it.
 *
 * Steps of the script: 1 compute the rendezvous (first node's NodeAddr, a port derived from the job id);
 * 2 ask every node for its GPUs with a one-task-per-node `srun` probe (SLURM_STEP_GPUS, which are the
 * node's physical GRES indices, and CUDA_VISIBLE_DEVICES as the job sees it), falling back to the batch
 * host's SLURM_JOB_GPUS when the probe fails; 3 write binding.json; 4 run rank.sh in one `srun` step with
 * `--ntasks-per-node` (each rank sets RANK / LOCAL_RANK / NODE_RANK / WORLD_SIZE from SLURM_PROCID /
 * SLURM_LOCALID / SLURM_NODEID / SLURM_NTASKS and runs argv); 5 write exit.json with srun's exit status.
 *
 * The script survives SIGTERM so that the task's exit is still recorded when it can be; a SIGTERM that
 * comes before the task's step (a cancel right after binding.json) means the step never starts, and one
 * that comes while srun is being started is passed on to it (run_step). When the job is
 * cancelled or reaches its time limit, Slurm SIGKILLs what is left after KillWait: there may then be no
 * exit.json, and the job's Slurm state (CANCELLED, TIMEOUT) is the answer in any case.
 *
 * With a sandbox (docs/decisions/0018-slurm-sandbox.md) every rank builds a bwrap sandbox on its node
 * (rank-script.ts). The task sees its own directory at /task and nothing of the job directory, so it can
 * neither read other jobs' files nor write binding.json or exit.json.
 */
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SlurmRequestError } from './errors.js';
import { bashQuote, JOB_PATH, renderRankScript, taskEnvFile, type WrapperSandbox } from './rank-script.js';

export { bashQuote, type WrapperSandbox } from './rank-script.js';

/** What the wrapper runs. */
export interface JobWrapperSpec {
  /** The per-job directory (absolute; on the filesystem shared with the compute nodes). */
  jobDir: string;
  /** The task command as an argv (argv[0] resolved by the task's PATH on the node, or absolute). */
  argv: string[];
  /**
   * The task's environment before the binding variables (the fixed base, the spec's env, GPU_BROKER_*),
   * written to task.env. Default: PATH and LANG only.
   */
  taskEnv?: Record<string, string>;
  /** Tasks per node (must match the submit's ntasksPerNode); default 1. */
  ntasksPerNode?: number;
  /** Run every rank in this bwrap sandbox (rank-script.ts); absent: run argv as it is. */
  sandbox?: WrapperSandbox;
  /**
   * srun and scontrol as the worker resolved them at start (absolute; the same path on the nodes);
   * default: found on the script's fixed PATH.
   */
  slurmCommands?: { srun?: string | null; scontrol?: string | null };
  /** Lowest rendezvous port; the port is base + job id mod span. Default 20000. */
  masterPortBase?: number;
  /** Span of rendezvous ports; default 10000 (20000–29999 stays below Linux's ephemeral range). */
  masterPortSpan?: number;
  /**
   * Caps the task's output in stdout.log and stderr.log: each keeps at most `bytes`, then `marker`
   * once (see the module comment). Absent: the files take whatever the task writes.
   */
  logCap?: { bytes: number; marker: string };
}

/** Paths of a job's files. */
export interface JobFiles {
  jobDir: string;
  script: string;
  stdout: string;
  stderr: string;
  binding: string;
  exit: string;
  rank: string;
  env: string;
}

/** GPUs of one node as the job saw them. */
export interface BindingNode {
  node: string;
  /** Physical GRES indices on that node (SLURM_STEP_GPUS / SLURM_JOB_GPUS). */
  gpus: number[];
  /** CUDA_VISIBLE_DEVICES as set for the job on that node (may be renumbered under ConstrainDevices). */
  cuda_visible_devices: string | null;
}

/** binding.json (version 1). */
export interface JobBinding {
  version: 1;
  job_id: string;
  nodes: string[];
  per_node: BindingNode[];
  master_addr: string;
  master_port: number;
  world_size: number;
  ntasks_per_node: number;
  /** ISO-8601 UTC with milliseconds. */
  started_at: string;
  /** 'probe' when every node answered the srun probe, 'batch-env' when only the batch host's env was read. */
  gpu_source: 'probe' | 'batch-env';
}

/** exit.json (version 1). */
export interface JobExit {
  version: 1;
  job_id: string;
  /** srun's exit status: the highest exit code of the ranks, or 128+signal. */
  exit_code: number;
  ended_at: string;
}

/** The files of a job dir. */
export function jobFiles(jobDir: string): JobFiles {
  return {
    jobDir,
    script: join(jobDir, 'job.sh'),
    stdout: join(jobDir, 'stdout.log'),
    stderr: join(jobDir, 'stderr.log'),
    binding: join(jobDir, 'binding.json'),
    exit: join(jobDir, 'exit.json'),
    rank: join(jobDir, 'rank.sh'),
    env: join(jobDir, 'task.env'),
  };
}

/** The rendezvous port the script derives from a job id (same formula; exported for tests and the worker). */
export function masterPortFor(jobId: string, base = 20000, span = 10000): number {
  const n = Number(/^\d+/.exec(jobId)?.[0] ?? '0');
  return base + (n % span);
}

/** What job.sh is rendered from, once the spec is checked. */
interface BatchSettings {
  jobDir: string;
  tasks: number;
  portBase: number;
  portSpan: number;
  /** srun and scontrol, quoted for bash. */
  srun: string;
  scontrol: string;
  logCap: JobWrapperSpec['logCap'];
}

/** A Slurm command as given (absolute), or its name to find on the script's PATH. */
function slurmCommand(given: string | null | undefined, name: string): string {
  if (given === undefined || given === null) return name;
  if (!given.startsWith('/') || /[\0\n\r]/.test(given))
    throw new SlurmRequestError(`${name} must be an absolute path: '${given}'`);
  return given;
}

/** Checks the spec (throws SlurmRequestError) and fills in the defaults. */
function batchSettings(spec: JobWrapperSpec): BatchSettings {
  if (!spec.jobDir.startsWith('/') || /[\0\n\r]/.test(spec.jobDir))
    throw new SlurmRequestError(`jobDir must be an absolute path without NUL or newlines: '${spec.jobDir}'`);
  if (spec.argv.length === 0 || spec.argv[0] === '') throw new SlurmRequestError('argv must not be empty');
  const tasks = spec.ntasksPerNode ?? 1;
  if (!Number.isInteger(tasks) || tasks < 1 || tasks > 1024)
    throw new SlurmRequestError(`bad ntasksPerNode ${tasks}`);
  const base = spec.masterPortBase ?? 20000;
  const span = spec.masterPortSpan ?? 10000;
  if (!Number.isInteger(base) || !Number.isInteger(span) || base < 1024 || span < 1 || base + span > 65536)
    throw new SlurmRequestError(`bad rendezvous port range ${base}+${span}`);
  const srun = bashQuote(slurmCommand(spec.slurmCommands?.srun, 'srun'));
  const scontrol = bashQuote(slurmCommand(spec.slurmCommands?.scontrol, 'scontrol'));
  const cap = spec.logCap;
  if (cap !== undefined && (!Number.isSafeInteger(cap.bytes) || cap.bytes < 1 || cap.marker.includes('\0')))
    throw new SlurmRequestError(`bad log cap ${cap.bytes}`);
  const jobDir = jobFiles(spec.jobDir).jobDir;
  return { jobDir, tasks, portBase: base, portSpan: span, srun, scontrol, logCap: cap };
}

/** job.sh's start: the clean environment, strict shell, the job's settings and the script's helpers. */
function batchPreamble(b: BatchSettings): string {
  return `#!/bin/bash --norc
# gpu-broker Slurm job wrapper (generated; see worker/slurm/cli/job-wrapper.ts)
# (A #! line passes one argument: --norc. A non-interactive bash reads no profile; BASH_ENV is the one
# startup file it would read, and sbatch's fixed environment never carries it.)
# Start again from nothing but Slurm's own variables (and the GPUs it set for the batch step), a fixed
# PATH and LANG: whatever else the batch step was given reaches no step of this job.
if [ "\${GPU_BROKER_JOB_ENV:-}" != clean ]; then
  KEEP=()
  for v in "\${!SLURM@}" CUDA_VISIBLE_DEVICES HIP_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES GPU_DEVICE_ORDINAL; do
    [[ -v $v ]] && KEEP+=("$v=\${!v}")
  done
  exec /usr/bin/env -i GPU_BROKER_JOB_ENV=clean PATH=${bashQuote(JOB_PATH)} LANG=C "\${KEEP[@]}" /bin/bash --noprofile --norc "$0"
fi
unset GPU_BROKER_JOB_ENV
set -u
umask 077
SRUN=${b.srun}
SCONTROL=${b.scontrol}
# A plain scancel sends SIGTERM to this shell as well as the task: keep running (a handler, not an
# ignore, so children get the default disposition) until the task's step returns, then write exit.json.
# The handler remembers it: a job cancelled before its task's step starts never starts it (without
# this the task would run until Slurm's SIGKILL after KillWait). Slurm SIGKILLs what is left anyway.
CANCELLED=0
trap 'CANCELLED=1' TERM
JOB_DIR=${bashQuote(b.jobDir)}
NTASKS_PER_NODE=${b.tasks}
now() { date -u +%Y-%m-%dT%H:%M:%S.%3NZ; }
# write_atomic FILE: stdin to FILE.tmp.PID, then rename over FILE
write_atomic() { local tmp="$1.tmp.$$"; cat >"$tmp" && mv -f "$tmp" "$1"; }
# gpu_list TEXT: "0,1,4" -> "0,1,4" when it is a plain index list, else ""
gpu_list() { case "$1" in ''|*[!0-9,]*) echo '' ;; *) echo "$1" ;; esac; }
# run_step CMD...: CMD in the background, so that a SIGTERM that came before it started (CANCELLED) is
# passed on to it; RC is its exit status. A SIGTERM interrupts wait (the trap runs, wait says 143):
# wait again while the step lives. (Not "until wait says something else": bash can lose the status of
# a child that ends just as the trap interrupts wait, and would then wait for it for ever.)
run_step() {
  RC=143
  [ "$CANCELLED" = 1 ] && return
  "$@" & local pid=$!
  [ "$CANCELLED" = 1 ] && kill -TERM "$pid" 2>/dev/null
  wait "$pid"; RC=$?
  while kill -0 "$pid" 2>/dev/null; do wait "$pid"; RC=$?; done
}
STARTED_AT=$(now)

`;
}

/** Step 1: the rendezvous address and port, and the world size. */
function rendezvousStep(b: BatchSettings): string {
  return `# 1. rendezvous: the first node (the batch host is always the first), by its NodeAddr
NODES=$("$SCONTROL" show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null) || NODES=\${SLURMD_NODENAME:-$(hostname)}
FIRST=$(printf '%s\\n' "$NODES" | head -n 1)
ADDR=$("$SCONTROL" show node -o "$FIRST" 2>/dev/null | tr ' ' '\\n' | sed -n 's/^NodeAddr=//p' | head -n 1)
export MASTER_ADDR=\${ADDR:-$FIRST}
export MASTER_PORT=$(( ${b.portBase} + \${SLURM_JOB_ID%%[!0-9]*} % ${b.portSpan} ))
NNODES=\${SLURM_JOB_NUM_NODES:-1}
export WORLD_SIZE=$(( NNODES * NTASKS_PER_NODE ))

`;
}

/** Step 2: every node's GPUs, from a one-task-per-node probe or else the batch host's environment. */
const PROBE_STEP = `# 2. GPUs per node: one probe task per node (none when the job is already cancelled)
PROBE=""
[ "$CANCELLED" = 1 ] || PROBE=$("$SRUN" --export=ALL --nodes="$NNODES" --ntasks="$NNODES" --ntasks-per-node=1 --kill-on-bad-exit=1 \\
  /bin/bash --noprofile --norc -c 'echo "GPUPROBE $SLURMD_NODENAME \${SLURM_STEP_GPUS:-\${SLURM_JOB_GPUS:-}} \${CUDA_VISIBLE_DEVICES:-}"' 2>/dev/null \\
  | grep '^GPUPROBE ')
GPU_SOURCE=probe
if [ "$(printf '%s\\n' "$PROBE" | grep -c '^GPUPROBE ')" != "$NNODES" ]; then
  GPU_SOURCE=batch-env
  PROBE="GPUPROBE \${SLURMD_NODENAME:-$FIRST} \${SLURM_JOB_GPUS:-} \${CUDA_VISIBLE_DEVICES:-}"
fi

`;

/** Step 3: binding.json, nodes in node-list order. */
const BINDING_STEP = `# 3. binding.json
json_nodes=""; json_per=""
for n in $NODES; do
  case "$n" in *[!A-Za-z0-9._-]*) continue ;; esac
  json_nodes="$json_nodes\${json_nodes:+,}\\"$n\\""
done
# in node-list order
for want in $NODES; do
  while read -r _ node gpus cvd; do
    [ "$node" = "$want" ] || continue
    case "$node" in ''|*[!A-Za-z0-9._-]*) continue ;; esac
    gpus=$(gpu_list "\${gpus:-}"); cvd=$(gpu_list "\${cvd:-}")
    if [ -n "$cvd" ]; then cvd_json="\\"$cvd\\""; else cvd_json=null; fi
    json_per="$json_per\${json_per:+,}{\\"node\\":\\"$node\\",\\"gpus\\":[$gpus],\\"cuda_visible_devices\\":$cvd_json}"
    break
  done <<<"$PROBE"
done
case "$MASTER_ADDR" in *[!A-Za-z0-9._:-]*) MASTER_ADDR=$FIRST ;; esac
printf '{"version":1,"job_id":"%s","nodes":[%s],"per_node":[%s],"master_addr":"%s","master_port":%d,"world_size":%d,"ntasks_per_node":%d,"started_at":"%s","gpu_source":"%s"}\\n' \\
  "\${SLURM_JOB_ID%%[!0-9_+]*}" "$json_nodes" "$json_per" "$MASTER_ADDR" "$MASTER_PORT" "$WORLD_SIZE" "$NTASKS_PER_NODE" "$STARTED_AT" "$GPU_SOURCE" \\
  | write_atomic "$JOB_DIR/binding.json"

`;

/** The task's srun step: every rank runs rank.sh; `$OUT`/`$ERR` name where its output goes. */
const TASK_STEP = `"$SRUN" --export=ALL --nodes="$NNODES" --ntasks=$(( NNODES * NTASKS_PER_NODE )) --ntasks-per-node="$NTASKS_PER_NODE" --kill-on-bad-exit=1 \\
  /bin/bash --noprofile --norc "$JOB_DIR/rank.sh"`;

/**
 * Step 4 with the log cap: the step writes into two FIFOs, each drained by a `cap_log` (see the module
 * comment). `head -c` reads no byte past its count, so the one byte `head -c 1` then takes says whether
 * there was more; it runs under `stdbuf -o0` where that works, since head's stdio would otherwise hold
 * up to a buffer of output back from the file (and from the worker's live tail) until it exits. The readers ignore SIGTERM (a plain scancel sends it to the whole batch step) so that
 * the task's last words still land; Slurm SIGKILLs them after KillWait anyway. Without FIFOs (mkfifo
 * failed) the step writes to the files uncapped, and says so on stderr.
 */
function cappedTaskStep(cap: { bytes: number; marker: string }): string {
  return `# 4. the task, one srun step: every rank runs rank.sh (its rank variables, its sandbox, the task's env).
# Its stdout and stderr reach stdout.log and stderr.log through cap_log: at most LOG_CAP bytes each, then
# the marker line once; the rest is read and dropped, so the task never blocks on a full pipe.
LOG_CAP=${cap.bytes}
LOG_MARKER=${bashQuote(cap.marker)}
# head buffers what it writes to a file; unbuffered (stdbuf -o0), each piece lands as it comes.
HEAD=(head)
stdbuf -o0 true 2>/dev/null && HEAD=(stdbuf -o0 head)
cap_log() {
  trap '' TERM
  "\${HEAD[@]}" -c "$LOG_CAP"
  if [ "$(head -c 1 | wc -c)" != 0 ]; then printf '%s' "$LOG_MARKER"; cat >/dev/null; fi
}
OUT_FIFO="$JOB_DIR/stdout.fifo"; ERR_FIFO="$JOB_DIR/stderr.fifo"
rm -f "$OUT_FIFO" "$ERR_FIFO"
if mkfifo -m 600 "$OUT_FIFO" "$ERR_FIFO"; then
  # No open of a FIFO may block (a reader killed by an early SIGTERM would leave the step's open waiting
  # for ever): this shell holds each one read-write (8, 9) while the step runs, opens the readers' ends
  # (6, 7) itself and hands them over, and lets go of its own ends once the step has returned.
  exec 8<>"$OUT_FIFO" 9<>"$ERR_FIFO" 6<"$OUT_FIFO" 7<"$ERR_FIFO"
  cap_log <&6 6<&- 7<&- 8>&- 9>&- & OUT_PID=$!
  cap_log <&7 >&2 6<&- 7<&- 8>&- 9>&- & ERR_PID=$!
  exec 6<&- 7<&-
  run_step ${TASK_STEP} >"$OUT_FIFO" 2>"$ERR_FIFO" 8>&- 9>&-
  exec 8>&- 9>&-
  # A SIGTERM interrupts wait (the trap runs): wait again until each reader has ended.
  for p in "$OUT_PID" "$ERR_PID"; do while kill -0 "$p" 2>/dev/null; do wait "$p"; done; done
  rm -f "$OUT_FIFO" "$ERR_FIFO"
else
  echo "gpu-broker: cannot create the log FIFOs in $JOB_DIR: the task's output is not capped" >&2
  run_step ${TASK_STEP}
fi

`;
}

/** Step 4 without a log cap. */
const UNCAPPED_TASK_STEP = `# 4. the task, one srun step: every rank runs rank.sh (its rank variables, its sandbox, the task's env)
run_step ${TASK_STEP}

`;

/** Step 5: exit.json records the step's status. */
const EXIT_STEP = `# 5. exit.json
printf '{"version":1,"job_id":"%s","exit_code":%d,"ended_at":"%s"}\\n' "\${SLURM_JOB_ID%%[!0-9_+]*}" "$RC" "$(now)" \\
  | write_atomic "$JOB_DIR/exit.json"
exit "$RC"
`;

/** The batch script for a spec (pure). */
export function renderBatchScript(spec: JobWrapperSpec): string {
  const b = batchSettings(spec);
  const taskStep = b.logCap === undefined ? UNCAPPED_TASK_STEP : cappedTaskStep(b.logCap);
  return batchPreamble(b) + rendezvousStep(b) + PROBE_STEP + BINDING_STEP + taskStep + EXIT_STEP;
}

/** Why ranks could not set up their sandbox (setup-error.<rank> files, at most 8, each cut to 1 KiB). */
export async function readSetupErrors(jobDir: string): Promise<string[]> {
  let names: string[];
  try {
    names = (await readdir(jobDir)).filter((n) => /^setup-error\.\d+$/.test(n)).sort();
  } catch {
    return [];
  }
  const out: string[] = [];
  for (const name of names.slice(0, 8)) {
    const text = await readOptional(join(jobDir, name)).catch(() => null);
    if (text !== null && text.trim() !== '') out.push(text.trim().slice(0, 1024));
  }
  return out;
}

/**
 * Creates the job directory (0700) and writes job.sh and rank.sh (0700) and task.env (0600) into it;
 * fails if the directory exists (a job directory is never reused). Returns the paths to pass to the
 * driver's submit.
 */
export async function writeJobFiles(spec: JobWrapperSpec): Promise<JobFiles> {
  const script = renderBatchScript(spec);
  const rank = renderRankScript(spec.jobDir, spec.argv, spec.sandbox);
  const env = taskEnvFile(spec.taskEnv ?? { PATH: JOB_PATH, LANG: 'C.UTF-8' });
  const f = jobFiles(spec.jobDir);
  await mkdir(f.jobDir, { mode: 0o700 });
  await writeFile(f.env, env, { mode: 0o600, flag: 'wx' });
  await writeFile(f.script, script, { mode: 0o700, flag: 'wx' });
  await writeFile(f.rank, rank, { mode: 0o700, flag: 'wx' });
  if (spec.sandbox?.seccomp !== undefined)
    await writeFile(join(f.jobDir, 'seccomp.bpf'), spec.sandbox.seccomp, { mode: 0o600, flag: 'wx' });
  return f;
}

/** Reads binding.json; null while absent. Throws on a malformed file (the job dir is the job's to write). */
export async function readBinding(jobDir: string): Promise<JobBinding | null> {
  const raw = await readOptional(jobFiles(jobDir).binding);
  if (raw === null) return null;
  const v = JSON.parse(raw) as Partial<JobBinding>;
  if (
    v.version !== 1 ||
    typeof v.job_id !== 'string' ||
    !Array.isArray(v.nodes) ||
    !Array.isArray(v.per_node) ||
    typeof v.master_addr !== 'string' ||
    typeof v.master_port !== 'number' ||
    typeof v.started_at !== 'string'
  )
    throw new SlurmRequestError(`malformed binding.json in ${jobDir}`);
  return v as JobBinding;
}

/** Reads exit.json; null while absent. */
export async function readExit(jobDir: string): Promise<JobExit | null> {
  const raw = await readOptional(jobFiles(jobDir).exit);
  if (raw === null) return null;
  const v = JSON.parse(raw) as Partial<JobExit>;
  if (v.version !== 1 || typeof v.job_id !== 'string' || typeof v.exit_code !== 'number')
    throw new SlurmRequestError(`malformed exit.json in ${jobDir}`);
  return v as JobExit;
}

async function readOptional(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}
