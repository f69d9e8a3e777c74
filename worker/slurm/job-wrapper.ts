/**
 * The batch script a Slurm job runs, and the files it leaves in its job directory:
 *
 *   <jobDir>/job.sh        this script (0700; the directory is 0700)
 *   <jobDir>/stdout.log    sbatch --output (the task's stdout, all ranks)
 *   <jobDir>/stderr.log    sbatch --error
 *   <jobDir>/binding.json  written atomically (tmp + rename) when the job starts, before the task
 *   <jobDir>/exit.json     written atomically when the task's srun step returns
 *   <jobDir>/rank.sh       with a sandbox: what every rank runs (builds the bwrap call on its node)
 *   <jobDir>/sandbox-started.<rank> "started", written from inside the sandbox just before the task
 *   <jobDir>/setup-error.<rank>      why a rank could not set up its sandbox (the task never ran there)
 *
 * Steps of the script: 1 compute the rendezvous (first node's NodeAddr, a port derived from the job id);
 * 2 ask every node for its GPUs with a one-task-per-node `srun` probe (SLURM_STEP_GPUS, which are the
 * node's physical GRES indices, and CUDA_VISIBLE_DEVICES as the job sees it), falling back to the batch
 * host's SLURM_JOB_GPUS when the probe fails; 3 write binding.json; 4 run the task in one `srun` step
 * with `--ntasks-per-node`, where each rank exports RANK / LOCAL_RANK / NODE_RANK / WORLD_SIZE from
 * SLURM_PROCID / SLURM_LOCALID / SLURM_NODEID / SLURM_NTASKS and execs launcherPrefix + argv; 5 write
 * exit.json with srun's exit status.
 *
 * The job is submitted with `--export=NONE,…` (driver.ts), which Slurm records in SLURM_EXPORT_ENV; the
 * script's own srun steps therefore pass `--export=ALL` so that ranks see the batch environment.
 * The script survives SIGTERM so that the task's exit is still recorded when it can be. When the job is cancelled or reaches its time limit, Slurm SIGKILLs what is
 * left after KillWait: there may then be no exit.json, and the job's Slurm state (CANCELLED, TIMEOUT)
 * is the answer in any case.
 *
 * With a sandbox (docs/decisions/0018-slurm-sandbox.md), every rank runs rank.sh instead of argv:
 * it checks bwrap, finds the device nodes of the GPUs Slurm gave the rank on its node
 * (SLURM_STEP_GPUS, else SLURM_JOB_GPUS on a single node), binds only those (and the vendor's control
 * nodes) into a bwrap sandbox whose other arguments the worker fixed, numbers them 0..n-1 in
 * CUDA/HIP/ROCR_VISIBLE_DEVICES as the local sandbox does, and runs the task in it. The task sees its
 * own directory at /task and nothing of the job directory, so it can neither read other jobs' files
 * nor write binding.json or exit.json. A rank that cannot build the sandbox (no bwrap, a missing
 * device node, no GPUs, bwrap refusing) writes setup-error.<rank> and exits 125 without running the
 * task: never unsandboxed.
 *
 * The argv and prefix are embedded as single-quoted bash words (`'` → `'\''`); NUL cannot be embedded
 * and is refused. Nothing of argv is ever evaluated by a shell: the rank's `bash -c` runs a fixed
 * script and execs `"$@"`.
 */
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { SlurmRequestError } from './errors.js';

/** What the wrapper runs. */
export interface JobWrapperSpec {
  /** The per-job directory (absolute; on the filesystem shared with the compute nodes). */
  jobDir: string;
  /**
   * The task command as an argv (argv[0] resolved by PATH on the node, or absolute). With a sandbox the
   * ranks run rank.sh, whose `after` words end with the same argv.
   */
  argv: string[];
  /** Words put before argv in every rank (e.g. a bwrap invocation); default none. */
  launcherPrefix?: string[];
  /** Tasks per node (must match the submit's ntasksPerNode); default 1. */
  ntasksPerNode?: number;
  /** Run every rank in this bwrap sandbox (see the module comment); absent: run argv as it is. */
  sandbox?: WrapperSandbox;
  /** Lowest rendezvous port; the port is base + job id mod span. Default 20000. */
  masterPortBase?: number;
  /** Span of rendezvous ports; default 10000 (20000–29999 stays below Linux's ephemeral range). */
  masterPortSpan?: number;
}

/** How ranks are sandboxed on their node; the worker fixes everything but the device binds. */
export interface WrapperSandbox {
  /** The bwrap executable (absolute; the same path on every node). */
  bwrap: string;
  /** bwrap's arguments up to where the device binds go (after its /dev, before `--chdir`). */
  before: string[];
  /** The rest: `--chdir /task --` [setpriv …] argv (the first three words exactly so). */
  after: string[];
  /**
   * The directory holding the nodes' GPU device files `nvidia<index>` (Slurm's gres.conf `File=`);
   * `%n` is replaced by the node's name. Usually /dev.
   */
  gpuDevDir: string;
  /**
   * What the GPU device files are: `nvidia` (`<dir>/nvidia<i>`, plus /dev/nvidiactl and the UVM nodes
   * where present) or `hy` (Hygon DCU / ROCm: `<dir>/dri/renderD<128+i>`, plus `<dir>/kfd`, required),
   * as on a local worker (sandbox-devices.ts). Default nvidia.
   */
  gpuKind?: 'nvidia' | 'hy';
  /**
   * Files the policy pins by sha256 (an executable, an interpreter's script): each rank checks them on
   * its node before the sandbox is built (the worker checked them on the submit host).
   */
  pins?: ReadonlyArray<{ path: string; sha256: string }>;
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
  };
}

/** The rendezvous port the script derives from a job id (same formula; exported for tests and the worker). */
export function masterPortFor(jobId: string, base = 20000, span = 10000): number {
  const n = Number(/^\d+/.exec(jobId)?.[0] ?? '0');
  return base + (n % span);
}

/** Quotes one word for bash (single quotes; `'` becomes `'\''`). */
export function bashQuote(word: string): string {
  if (word.includes('\0')) throw new SlurmRequestError('argv word contains NUL');
  return `'${word.replace(/'/g, `'\\''`)}'`;
}

/** The batch script for a spec (pure). */
export function renderBatchScript(spec: JobWrapperSpec): string {
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
  const words = [...(spec.launcherPrefix ?? []), ...spec.argv].map(bashQuote).join(' ');
  if (spec.sandbox !== undefined && spec.launcherPrefix !== undefined)
    throw new SlurmRequestError('a sandboxed job takes no launcher prefix');
  const f = jobFiles(spec.jobDir);
  return `#!/bin/bash
# gpu-broker Slurm job wrapper (generated; see worker/slurm/job-wrapper.ts)
set -u
umask 077
# A plain scancel sends SIGTERM to this shell as well as the task: keep running (a handler, not an
# ignore, so children get the default disposition) until the task's step returns, then write exit.json.
# Slurm SIGKILLs what is left after KillWait anyway.
trap 'true' TERM
JOB_DIR=${bashQuote(f.jobDir)}
NTASKS_PER_NODE=${tasks}
now() { date -u +%Y-%m-%dT%H:%M:%S.%3NZ; }
# write_atomic FILE: stdin to FILE.tmp.PID, then rename over FILE
write_atomic() { local tmp="$1.tmp.$$"; cat >"$tmp" && mv -f "$tmp" "$1"; }
# gpu_list TEXT: "0,1,4" -> "0,1,4" when it is a plain index list, else ""
gpu_list() { case "$1" in ''|*[!0-9,]*) echo '' ;; *) echo "$1" ;; esac; }
STARTED_AT=$(now)

# 1. rendezvous: the first node (the batch host is always the first), by its NodeAddr
NODES=$(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null) || NODES=\${SLURMD_NODENAME:-$(hostname)}
FIRST=$(printf '%s\\n' "$NODES" | head -n 1)
ADDR=$(scontrol show node -o "$FIRST" 2>/dev/null | tr ' ' '\\n' | sed -n 's/^NodeAddr=//p' | head -n 1)
export MASTER_ADDR=\${ADDR:-$FIRST}
export MASTER_PORT=$(( ${base} + \${SLURM_JOB_ID%%[!0-9]*} % ${span} ))
NNODES=\${SLURM_JOB_NUM_NODES:-1}
export WORLD_SIZE=$(( NNODES * NTASKS_PER_NODE ))

# 2. GPUs per node: one probe task per node
PROBE=$(srun --export=ALL --nodes="$NNODES" --ntasks="$NNODES" --ntasks-per-node=1 --kill-on-bad-exit=1 \\
  bash -c 'echo "GPUPROBE $SLURMD_NODENAME \${SLURM_STEP_GPUS:-\${SLURM_JOB_GPUS:-}} \${CUDA_VISIBLE_DEVICES:-}"' 2>/dev/null \\
  | grep '^GPUPROBE ')
GPU_SOURCE=probe
if [ "$(printf '%s\\n' "$PROBE" | grep -c '^GPUPROBE ')" != "$NNODES" ]; then
  GPU_SOURCE=batch-env
  PROBE="GPUPROBE \${SLURMD_NODENAME:-$FIRST} \${SLURM_JOB_GPUS:-} \${CUDA_VISIBLE_DEVICES:-}"
fi

# 3. binding.json
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

# 4. the task, one srun step; every rank gets its rendezvous variables
srun --export=ALL --nodes="$NNODES" --ntasks=$(( NNODES * NTASKS_PER_NODE )) --ntasks-per-node="$NTASKS_PER_NODE" --kill-on-bad-exit=1 \\
  bash -c 'export RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" NODE_RANK="$SLURM_NODEID" WORLD_SIZE="$SLURM_NTASKS" LOCAL_WORLD_SIZE="$SLURM_NTASKS_PER_NODE"; exec "$@"' \\
  gpu-broker-rank ${spec.sandbox === undefined ? words : `/bin/bash ${bashQuote(f.rank)}`}
RC=$?

# 5. exit.json
printf '{"version":1,"job_id":"%s","exit_code":%d,"ended_at":"%s"}\\n' "\${SLURM_JOB_ID%%[!0-9_+]*}" "$RC" "$(now)" \\
  | write_atomic "$JOB_DIR/exit.json"
exit "$RC"
`;
}

/** The exit status of a rank that could not set up its sandbox (the task did not run there). */
export const SANDBOX_SETUP_EXIT = 125;

/**
 * rank.sh: what every rank of a sandboxed job runs (pure; see the module comment). The rank's
 * environment is the task's (the batch environment plus the rendezvous variables); bwrap passes it on.
 */
export function renderRankScript(jobDir: string, sandbox: WrapperSandbox): string {
  if (!sandbox.bwrap.startsWith('/')) throw new SlurmRequestError('the bwrap path must be absolute');
  if (!sandbox.gpuDevDir.startsWith('/') || /[\0\n\r]/.test(sandbox.gpuDevDir))
    throw new SlurmRequestError(`bad GPU device directory '${sandbox.gpuDevDir}'`);
  if (sandbox.after[0] !== '--chdir' || sandbox.after[2] !== '--' || sandbox.after.length < 4)
    throw new SlurmRequestError('the sandbox arguments must end with --chdir DIR -- COMMAND…');
  const array = (words: readonly string[]) => words.map(bashQuote).join(' ');
  return `#!/bin/bash
# gpu-broker Slurm rank (generated; see worker/slurm/job-wrapper.ts): the task in a bwrap sandbox
set -u
umask 077
JOB_DIR=${bashQuote(jobDir)}
BWRAP=${bashQuote(sandbox.bwrap)}
BEFORE=(${array(sandbox.before)})
AFTER=(${array(sandbox.after)})
NODE=\${SLURMD_NODENAME:-$(hostname)}
GPU_DEV_DIR=${bashQuote(sandbox.gpuDevDir)}
GPU_DEV_DIR=\${GPU_DEV_DIR//%n/$NODE}
GPU_KIND=${bashQuote(sandbox.gpuKind ?? 'nvidia')}
RANK_ID=\${SLURM_PROCID:-0}
# setup_failed MESSAGE: record why, say it on stderr, and leave without running the task
setup_failed() {
  local tmp="$JOB_DIR/setup-error.$RANK_ID.tmp.$$"
  printf 'node %s rank %s: %s\\n' "$NODE" "$RANK_ID" "$1" >"$tmp" && mv -f "$tmp" "$JOB_DIR/setup-error.$RANK_ID"
  printf 'gpu-broker: cannot sandbox the task on node %s: %s\\n' "$NODE" "$1" >&2
  exit ${SANDBOX_SETUP_EXIT}
}
[ -x "$BWRAP" ] || setup_failed "bubblewrap ($BWRAP) is not installed"
# Pinned files must be the bytes the policy pinned, here on this node too.
PINS=(${array((sandbox.pins ?? []).flatMap((p) => [p.sha256, p.path]))})
for ((k = 0; k < \${#PINS[@]}; k += 2)); do
  want=\${PINS[k]}; path=\${PINS[k+1]}
  have=$(sha256sum <"$path" 2>/dev/null | cut -d' ' -f1)
  [ "$have" = "$want" ] || setup_failed "pinned file $path has sha256 \${have:-(unreadable)} on this node; policy pins $want"
done
# The GPUs Slurm gave this rank on this node: the step's, else (one node) the job's.
GPUS=\${SLURM_STEP_GPUS:-}
if [ -z "$GPUS" ] && [ "\${SLURM_JOB_NUM_NODES:-1}" = 1 ]; then GPUS=\${SLURM_JOB_GPUS:-}; fi
case "$GPUS" in ''|*[!0-9,]*) setup_failed "Slurm named no GPUs for this rank ('$GPUS')" ;; esac
DEV=()
# bwrap would make /dev/dri root's 0700: a task uid could not reach its render nodes.
[ "$GPU_KIND" = hy ] && DEV+=(--perms 0755 --dir /dev/dri)
VISIBLE=''
n=0
for i in \${GPUS//,/ }; do
  if [ "$GPU_KIND" = hy ]; then name="dri/renderD$((128 + i))"; else name="nvidia$i"; fi
  node_file="$GPU_DEV_DIR/$name"
  [ -c "$node_file" ] || setup_failed "the device node $node_file of GPU $i is missing"
  DEV+=(--dev-bind "$node_file" "/dev/$name")
  VISIBLE="$VISIBLE\${VISIBLE:+,}$n"
  n=$((n + 1))
done
if [ "$GPU_KIND" = hy ]; then
  [ -c "$GPU_DEV_DIR/kfd" ] || setup_failed "the device node $GPU_DEV_DIR/kfd is missing"
  DEV+=(--dev-bind "$GPU_DEV_DIR/kfd" /dev/kfd)
else
  for c in nvidiactl nvidia-uvm nvidia-uvm-tools nvidia-modeset; do
    [ -c "/dev/$c" ] && DEV+=(--dev-bind "/dev/$c" "/dev/$c")
  done
fi
# Only the rank's devices exist in the sandbox, and CUDA/HIP number what they can open from 0.
export CUDA_VISIBLE_DEVICES="$VISIBLE" HIP_VISIBLE_DEVICES="$VISIBLE" ROCR_VISIBLE_DEVICES="$VISIBLE"
export GPU_BROKER_GPU_IDS="$GPUS" CUDA_DEVICE_ORDER=PCI_BUS_ID
STARTED="$JOB_DIR/sandbox-started.$RANK_ID"
# Inside the sandbox, once bwrap has built it, a shim writes "started" on fd 4, closes it and execs the
# task; bwrap's own errors (a missing path, no user namespaces) come before, and leave the file empty.
"$BWRAP" "\${BEFORE[@]}" "\${DEV[@]}" "\${AFTER[@]:0:3}" \\
  /bin/sh -c 'printf started >&4; exec 4>&-; exec "$@"' gpu-broker-sandbox "\${AFTER[@]:3}" 4>"$STARTED"
RC=$?
grep -q '^started$' "$STARTED" 2>/dev/null || setup_failed "bwrap could not create the sandbox (exit $RC; its message is in the task's stderr)"
exit "$RC"
`;
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
 * Creates the job directory (0700) and writes job.sh (0700) into it; fails if the directory exists
 * (a job directory is never reused). Returns the paths to pass to the driver's submit.
 */
export async function writeJobFiles(spec: JobWrapperSpec): Promise<JobFiles> {
  const script = renderBatchScript(spec);
  const f = jobFiles(spec.jobDir);
  await mkdir(f.jobDir, { mode: 0o700 });
  await writeFile(f.script, script, { mode: 0o700, flag: 'wx' });
  if (spec.sandbox !== undefined)
    await writeFile(f.rank, renderRankScript(spec.jobDir, spec.sandbox), { mode: 0o700, flag: 'wx' });
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
