/**
 * rank.sh: what every rank of a Slurm job runs on its node (docs/decisions/0018-slurm-sandbox.md, "Environment").
 *
 * The spec's environment reaches the task's own process and nothing before it. The worker writes it,
 * with the fixed base and its GPU_BROKER_* variables, to `<jobDir>/task.env` (0600, NUL-separated
 * `NAME=VALUE` entries); no shell, srun, bwrap or setpriv ever has it in its environment. rank.sh starts
 * from the clean environment job.sh gave srun (`bash --noprofile --norc`, no BASH_ENV), adds the binding
 * variables it computes on the node (RANK…, MASTER_*, the rank's GPUs, a fixed list of Slurm ids) and:
 *
 *  - unsandboxed (`--isolation none`): reads task.env into an array and execs
 *    `env -i -- <task.env entries> <binding> argv` (later entries win, so a spec cannot set a binding);
 *  - sandboxed (docs/decisions/0018-slurm-sandbox.md): builds the bwrap options — the worker's, the
 *    hidden paths that exist on this node, the rank's GPU device nodes, `--clearenv --setenv PATH …` —
 *    into a file it hands to bwrap with `--args` and unlinks, so bwrap's command line (the sandbox's
 *    /proc/1/cmdline) shows no host path; the task's entries go on another unlinked fd. Inside, after
 *    setpriv's uid drop, `bash --noprofile --norc` (whose environment is bwrap's cleared one) writes
 *    "started" on fd 4, reads the entries from fd 5 as data, closes fds 4-6 and execs `env -i -- … argv`.
 *
 * A rank that cannot set up its sandbox writes setup-error.<rank> and exits 125 without running the task.
 */
import { SlurmRequestError } from './errors.js';
import { sandboxDevicePath } from './gres.js';

/** The exit status of a rank that could not set up its sandbox (the task did not run there). */
export const SANDBOX_SETUP_EXIT = 125;

/** The search path of every script of a job (and of the sandbox before the task's env applies). */
export const JOB_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** `env`, which applies the task's environment (coreutils; the same path on every node). */
export const ENV_HELPER = '/usr/bin/env';

/**
 * Slurm's variables a task gets (ids, counts, names; none is a host path). Everything else Slurm sets
 * (SLURM_CONF, SLURM_SUBMIT_DIR, SLURM_SRUN_COMM_*, …) stays outside.
 */
export const SLURM_TASK_VARS = [
  'SLURM_JOB_ID',
  'SLURM_JOB_NAME',
  'SLURM_JOB_NUM_NODES',
  'SLURM_JOB_NODELIST',
  'SLURM_JOB_PARTITION',
  'SLURM_CLUSTER_NAME',
  'SLURMD_NODENAME',
  'SLURM_NODEID',
  'SLURM_PROCID',
  'SLURM_LOCALID',
  'SLURM_NTASKS',
  'SLURM_NTASKS_PER_NODE',
  'SLURM_CPUS_ON_NODE',
  'SLURM_STEP_GPUS',
  'SLURM_JOB_GPUS',
] as const;

/** How ranks are sandboxed on their node; the worker fixes everything but the device binds. */
export interface WrapperSandbox {
  /** The bwrap executable (absolute; the same path on every node). */
  bwrap: string;
  /**
   * The task's syscall filter (worker/sandbox/seccomp.ts), written to `<jobDir>/seccomp.bpf` with the
   * job's files; each rank hands it to bwrap (`--seccomp 7`). Absent: none.
   */
  seccomp?: Buffer;
  /** bwrap's options before the hidden paths (namespaces, the system tree). */
  pre: string[];
  /** Paths to hide: each one that exists on the node is covered (a dir by a tmpfs, a file by /dev/null). */
  hidden: string[];
  /** bwrap's options after the hidden paths, up to where the device binds go (before `--chdir`). */
  post: string[];
  /**
   * Hidden paths below a pinned dir or a named mount, as pairs `host path, path inside` (host-mounts.ts
   * `rehiddenBelow`): each whose host path exists on the node is covered again inside, after the binds.
   */
  rehide?: string[];
  /** Words run in the sandbox before the task (setpriv … `--` for a root worker; else none). */
  prefix: string[];
  /**
   * The directory holding the nodes' GPU device files `nvidia<index>` (Slurm's gres.conf `File=`);
   * `%n` is replaced by the node's name. Usually /dev.
   */
  gpuDevDir: string;
  /**
   * What the GPU device files are: `nvidia` (`<dir>/nvidia<i>`, plus /dev/nvidiactl and the UVM nodes
   * where present) or `hy` (Hygon DCU / ROCm: `<dir>/dri/renderD<128+i>`, plus `<dir>/kfd`, required),
   * as on a local worker (sandbox/devices.ts). Default nvidia.
   */
  gpuKind?: 'nvidia' | 'hy';
  /**
   * Per node, the device files of each GPU position (IDX, `SLURM_STEP_GPUS`) as the operator's gres.conf
   * gives them (gres.ts): a whole card's `nvidia<N>`, a MIG slice's parent node and its two capability
   * nodes. On a node named here a rank binds exactly the files of its positions (fails where one has
   * none); elsewhere `<gpuDevDir>/nvidia<position>` as before. nvidia only.
   */
  gresFiles?: Readonly<Record<string, ReadonlyArray<readonly string[] | null>>>;
  /**
   * Files the policy pins by sha256 (an executable, an interpreter's script): each rank checks them on
   * its node before the sandbox is built (the worker checked them on the submit host).
   */
  pins?: ReadonlyArray<{ path: string; sha256: string }>;
}

/**
 * Splits bwrapArgs' output (built with no hidden paths) for rank.sh: the options before where hidden
 * paths go (`--proc` starts what follows them), those after (up to `--chdir`), and the words run before
 * the task (setpriv … `--`); null when the layout is not that.
 */
export function splitBwrapArgs(
  args: readonly string[],
  argv: readonly string[],
): Pick<WrapperSandbox, 'pre' | 'post' | 'prefix'> | null {
  const proc = args.indexOf('--proc');
  const chdir = args.indexOf('--chdir');
  const command = args.slice(chdir + 3);
  if (proc < 0 || chdir < proc || args[chdir + 2] !== '--' || command.length < argv.length) return null;
  if (command.slice(command.length - argv.length).some((w, i) => w !== argv[i])) return null;
  return {
    pre: args.slice(0, proc),
    post: args.slice(proc, chdir),
    prefix: command.slice(0, command.length - argv.length),
  };
}

/** Quotes one word for bash (single quotes; `'` becomes `'\''`). */
export function bashQuote(word: string): string {
  if (word.includes('\0')) throw new SlurmRequestError('argv word contains NUL');
  return `'${word.replace(/'/g, `'\\''`)}'`;
}

/**
 * The paths to hide, absolute and without those under another one of the list (pure: whether each
 * exists, and as what, is decided on the node).
 */
export function hiddenPathList(paths: readonly string[]): string[] {
  const unique = [...new Set(paths.filter((p) => p.startsWith('/') && p !== '/' && !/[\0\n\r]/.test(p)))]
    .map((p) => p.replace(/\/+$/, ''))
    .sort();
  return unique.filter((p) => !unique.some((o) => o !== p && p.startsWith(`${o}/`)));
}

/**
 * The task.env file's bytes: one `NAME=VALUE` entry per variable, each ended by NUL. Throws on a name
 * that is not a shell name or a value holding NUL (no process environment can hold it).
 */
export function taskEnvFile(env: Readonly<Record<string, string>>): Buffer {
  let out = '';
  for (const [name, value] of Object.entries(env)) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(name))
      throw new SlurmRequestError(`bad environment variable name ${JSON.stringify(name)}`);
    if (value.includes('\0')) throw new SlurmRequestError(`environment variable ${name} contains NUL`);
    out += `${name}=${value}\0`;
  }
  return Buffer.from(out, 'utf8');
}

/** What runs inside the sandbox, as the task's uid, before the task (see the module comment). */
const LAUNCH = [
  'printf started >&4; exec 4>&-',
  'E=(); while IFS= read -r -d \'\' kv; do E+=("$kv"); done <&5',
  'exec 5<&- 6<&- 7<&-',
  `exec ${ENV_HELPER} -i -- "\${E[@]}" "$@"`,
].join('\n');

/** Why rank.sh cannot be rendered for this job dir and argv, as a thrown SlurmRequestError. */
function checkRankRequest(jobDir: string, argv: readonly string[]): void {
  if (!jobDir.startsWith('/') || /[\0\n\r]/.test(jobDir))
    throw new SlurmRequestError(`jobDir must be an absolute path without NUL or newlines: '${jobDir}'`);
  if (argv.length === 0 || argv[0] === '') throw new SlurmRequestError('argv must not be empty');
  // Behind `env -i --`, a program named with `=` would be read as one more variable.
  if ((argv[0] as string).includes('='))
    throw new SlurmRequestError(
      `argv[0] ${JSON.stringify(argv[0])} contains "=": name the program by a path without one`,
    );
}

/** Why rank.sh cannot build this sandbox, as a thrown SlurmRequestError. */
function checkSandbox(sandbox: WrapperSandbox): void {
  if (!sandbox.bwrap.startsWith('/')) throw new SlurmRequestError('the bwrap path must be absolute');
  if (!sandbox.gpuDevDir.startsWith('/') || /[\0\n\r]/.test(sandbox.gpuDevDir))
    throw new SlurmRequestError(`bad GPU device directory '${sandbox.gpuDevDir}'`);
  if ([...sandbox.pre, ...sandbox.post].includes('--chdir'))
    throw new SlurmRequestError('the sandbox options must not contain --chdir (rank.sh sets it)');
}

/** Words as the body of a bash array literal. */
const bashArray = (words: readonly string[]) => words.map(bashQuote).join(' ');

/** rank.sh's start: strict shell, the job's variables, `setup_failed`, and the checks every rank makes. */
function rankPreamble(jobDir: string, argv: readonly string[]): string {
  return `#!/bin/bash --norc
# gpu-broker Slurm rank (generated; see worker/slurm/cli/rank-script.ts)
set -u
umask 077
unset BASH_ENV ENV
export PATH=${bashQuote(JOB_PATH)} LANG=C
JOB_DIR=${bashQuote(jobDir)}
ARGV=(${bashArray(argv)})
NODE=\${SLURMD_NODENAME:-$(hostname)}
RANK_ID=\${SLURM_PROCID:-0}
# setup_failed MESSAGE: record why, say it on stderr, and leave without running the task
setup_failed() {
  local tmp="$JOB_DIR/setup-error.$RANK_ID.tmp.$$"
  printf 'node %s rank %s: %s\\n' "$NODE" "$RANK_ID" "$1" >"$tmp" && mv -f "$tmp" "$JOB_DIR/setup-error.$RANK_ID"
  printf 'gpu-broker: cannot sandbox the task on node %s: %s\\n' "$NODE" "$1" >&2
  exit ${SANDBOX_SETUP_EXIT}
}
[ -x ${ENV_HELPER} ] || setup_failed "${ENV_HELPER} is not installed (coreutils)"
[ -r "$JOB_DIR/task.env" ] || setup_failed "the task's environment file $JOB_DIR/task.env is missing"
`;
}

/** The binding variables every rank appends after task.env: rendezvous, rank, Slurm's ids. */
const RANK_BINDING = `# The binding: rendezvous and rank (job.sh exported MASTER_*), Slurm's ids. Appended after task.env.
BIND=("RANK=$RANK_ID" "LOCAL_RANK=\${SLURM_LOCALID:-0}" "NODE_RANK=\${SLURM_NODEID:-0}" "WORLD_SIZE=\${SLURM_NTASKS:-1}"
  "LOCAL_WORLD_SIZE=\${SLURM_NTASKS_PER_NODE:-1}" "MASTER_ADDR=\${MASTER_ADDR:-}" "MASTER_PORT=\${MASTER_PORT:-}")
for v in ${SLURM_TASK_VARS.join(' ')}; do
  [[ -v $v ]] && BIND+=("$v=\${!v}")
done
`;

/** Unsandboxed: the GPUs as Slurm set them for the step, and the task exec'd under `env -i`. */
const UNSANDBOXED_LAUNCH = `# Unsandboxed: the GPUs as Slurm set them for the step.
for v in CUDA_VISIBLE_DEVICES HIP_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES GPU_DEVICE_ORDINAL; do
  [[ -v $v ]] && BIND+=("$v=\${!v}")
done
BIND+=(CUDA_DEVICE_ORDER=PCI_BUS_ID "GPU_BROKER_GPU_IDS=\${SLURM_STEP_GPUS:-\${SLURM_JOB_GPUS:-}}")
E=()
while IFS= read -r -d '' kv; do E+=("$kv"); done <"$JOB_DIR/task.env"
exec ${ENV_HELPER} -i -- "\${E[@]}" "\${BIND[@]}" "\${ARGV[@]}"
`;

/** The sandbox's settings for rank.sh, the bwrap check, and the pins to check on the node. */
function sandboxSettings(sandbox: WrapperSandbox): string {
  return `BWRAP=${bashQuote(sandbox.bwrap)}
PRE=(${bashArray(sandbox.pre)})
HIDDEN=(${bashArray(sandbox.hidden)})
REHIDE=(${bashArray(sandbox.rehide ?? [])})
POST=(${bashArray(sandbox.post)})
PREFIX=(${bashArray(sandbox.prefix)})
LAUNCH=${bashQuote(LAUNCH)}
GPU_DEV_DIR=${bashQuote(sandbox.gpuDevDir)}
GPU_DEV_DIR=\${GPU_DEV_DIR//%n/$NODE}
GPU_KIND=${bashQuote(sandbox.gpuKind ?? 'nvidia')}
${gresFilesArrays(sandbox.gresFiles ?? {})}
[ -x "$BWRAP" ] || setup_failed "bubblewrap ($BWRAP) is not installed"
# Pinned files must be the bytes the policy pinned, here on this node too.
PINS=(${bashArray((sandbox.pins ?? []).flatMap((p) => [p.sha256, p.path]))})
`;
}

/** A file gres.conf names that rank.sh may bind: absolute, no comma (the list separator), no newline. */
const GRES_FILE = /^\/[^,\0\n\r]*$/;

/**
 * The gres.conf map as two bash associative arrays: GRES_NODES (the nodes it covers) and GRES_FILES
 * (`<node>/<position>` → comma-separated files). A position without files, or with a file that could
 * not travel in the list, is left out: its rank fails rather than bind something else.
 */
function gresFilesArrays(map: Readonly<Record<string, ReadonlyArray<readonly string[] | null>>>): string {
  const nodes: string[] = [];
  const files: string[] = [];
  for (const [node, positions] of Object.entries(map).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    if (!/^[A-Za-z0-9._-]{1,200}$/.test(node)) continue;
    nodes.push(`[${bashQuote(node)}]=1`);
    positions.forEach((list, i) => {
      if (
        list !== null &&
        list.length > 0 &&
        list.every((f) => GRES_FILE.test(f) && sandboxDevicePath(f) !== null)
      )
        files.push(`[${bashQuote(`${node}/${i}`)}]=${bashQuote(list.join(','))}`);
    });
  }
  return `# Device files per GPU position, from the operator's gres.conf (MIG slices: parent and capability nodes).
declare -A GRES_NODES=(${nodes.join(' ')})
declare -A GRES_FILES=(${files.join(' ')})`;
}

/** Each pinned file must hash to its pin on this node. */
const PIN_CHECK = `for ((k = 0; k < \${#PINS[@]}; k += 2)); do
  want=\${PINS[k]}; path=\${PINS[k+1]}
  have=$(sha256sum <"$path" 2>/dev/null | cut -d' ' -f1)
  [ "$have" = "$want" ] || setup_failed "pinned file $path has sha256 \${have:-(unreadable)} on this node; policy pins $want"
done
`;

/** The hidden paths that exist on this node, as bwrap options. */
const HIDE_PATHS = `# Hidden paths that exist on this node (bwrap cannot cover a path that is not there, nor need to).
HIDE=()
for p in "\${HIDDEN[@]}"; do
  if [ -d "$p" ]; then HIDE+=(--tmpfs "$p"); elif [ -e "$p" ]; then HIDE+=(--ro-bind /dev/null "$p"); fi
done
# Hidden paths a pinned dir or a mount shows again: covered again where they show, after the binds.
AGAIN=()
for ((k = 0; k < \${#REHIDE[@]}; k += 2)); do
  p=\${REHIDE[k]}; at=\${REHIDE[k+1]}
  if [ -d "$p" ]; then AGAIN+=(--tmpfs "$at"); elif [ -e "$p" ]; then AGAIN+=(--ro-bind /dev/null "$at"); fi
done
`;

/** The rank's GPU device nodes, as bwrap options, and the GPU variables of the binding. */
const GPU_DEVICES = `# The GPUs Slurm gave this rank on this node: the step's, else (one node) the job's.
GPUS=\${SLURM_STEP_GPUS:-}
if [ -z "$GPUS" ] && [ "\${SLURM_JOB_NUM_NODES:-1}" = 1 ]; then GPUS=\${SLURM_JOB_GPUS:-}; fi
case "$GPUS" in ''|*[!0-9,]*) setup_failed "Slurm named no GPUs for this rank ('$GPUS')" ;; esac
DEV=()
# bwrap would make /dev/dri root's 0700: a task uid could not reach its render nodes.
[ "$GPU_KIND" = hy ] && DEV+=(--perms 0755 --dir /dev/dri)
VISIBLE=''
n=0
# What Slurm set for the step, per GPU: a MIG- uuid (AutoDetect=nvml) names its slice as it is.
IFS=, read -r -a SLURM_VISIBLE <<<"\${CUDA_VISIBLE_DEVICES:-}"
declare -A BOUND=()
for i in \${GPUS//,/ }; do
  if [[ -v GRES_NODES[$NODE] ]]; then
    # gres.conf names this GPU's files (a slice: its parent node and its two capability nodes): exactly these.
    [[ -v GRES_FILES[$NODE/$i] ]] || setup_failed "gres.conf names no usable device files for GPU $i of node $NODE"
    IFS=, read -r -a files <<<"\${GRES_FILES[$NODE/$i]}"
    for f in "\${files[@]}"; do
      if [[ "$f" =~ /nvidia-caps/(nvidia-cap[0-9]+)$ ]]; then at="/dev/nvidia-caps/\${BASH_REMATCH[1]}"
      elif [[ "$f" =~ /(nvidia[0-9]+)$ ]]; then at="/dev/\${BASH_REMATCH[1]}"
      else setup_failed "gres.conf's file $f of GPU $i is no nvidia device node"; fi
      [ -c "$f" ] || setup_failed "the device node $f of GPU $i is missing"
      [[ -v BOUND[$at] ]] && continue
      BOUND[$at]=1
      # bwrap would make /dev/nvidia-caps root's 0700: a task uid could not reach its cap nodes.
      if [[ "$at" == /dev/nvidia-caps/* && ! -v BOUND[/dev/nvidia-caps] ]]; then
        BOUND[/dev/nvidia-caps]=1
        DEV+=(--perms 0755 --dir /dev/nvidia-caps)
      fi
      DEV+=(--dev-bind "$f" "$at")
    done
  else
    if [ "$GPU_KIND" = hy ]; then name="dri/renderD$((128 + i))"; else name="nvidia$i"; fi
    node_file="$GPU_DEV_DIR/$name"
    [ -c "$node_file" ] || setup_failed "the device node $node_file of GPU $i is missing"
    DEV+=(--dev-bind "$node_file" "/dev/$name")
  fi
  v=\${SLURM_VISIBLE[n]:-}
  [[ "$v" == MIG-* ]] || v=$n
  VISIBLE="$VISIBLE\${VISIBLE:+,}$v"
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
# Only the rank's devices exist in the sandbox, and CUDA/HIP number what they can open from 0 (a MIG
# slice Slurm named by its MIG- uuid keeps it: MIG devices are not renumbered).
BIND+=("CUDA_VISIBLE_DEVICES=$VISIBLE" "HIP_VISIBLE_DEVICES=$VISIBLE" "ROCR_VISIBLE_DEVICES=$VISIBLE"
  "GPU_BROKER_GPU_IDS=$GPUS" CUDA_DEVICE_ORDER=PCI_BUS_ID)
`;

/** Hands bwrap its options and the task its entries on unlinked fds, runs the sandbox, checks it started. */
const SANDBOXED_LAUNCH = `# The task's entries (fd 5) and bwrap's options (fd 6): files only root/the job's user can read, unlinked
# once open, so no copy stays in the job dir.
ENVF="$JOB_DIR/env.$RANK_ID.$$"
ARGF="$JOB_DIR/bwrap-args.$RANK_ID.$$"
{ cat "$JOB_DIR/task.env" && printf '%s\\0' "\${BIND[@]}"; } >"$ENVF" || setup_failed "cannot write $ENVF"
# The syscall filter (seccomp.bpf, written with the job's files), read by bwrap from fd 7.
SECCOMP=()
if [ -e "$JOB_DIR/seccomp.bpf" ]; then
  exec 7<"$JOB_DIR/seccomp.bpf" || setup_failed "cannot read $JOB_DIR/seccomp.bpf"
  SECCOMP=(--seccomp 7)
fi
printf '%s\\0' "\${PRE[@]}" "\${HIDE[@]}" "\${POST[@]}" "\${DEV[@]}" "\${AGAIN[@]}" "\${SECCOMP[@]}" \\
  --clearenv --setenv PATH "$PATH" --setenv LANG C --chdir /task >"$ARGF" || setup_failed "cannot write $ARGF"
exec 5<"$ENVF" 6<"$ARGF"
rm -f "$ENVF" "$ARGF"
STARTED="$JOB_DIR/sandbox-started.$RANK_ID"
# Inside the sandbox, once bwrap has built it, the launcher writes "started" on fd 4 and closes it;
# bwrap's own errors (a missing path, no user namespaces) come before, and leave the file empty.
"$BWRAP" --args 6 -- "\${PREFIX[@]}" /bin/bash --noprofile --norc -c "$LAUNCH" gpu-broker-task "\${ARGV[@]}" \\
  4>"$STARTED"
RC=$?
exec 5<&- 6<&- 7<&-
grep -q '^started$' "$STARTED" 2>/dev/null || setup_failed "bwrap could not create the sandbox (exit $RC; its message is in the task's stderr)"
exit "$RC"
`;

/** rank.sh for a job (pure; see the module comment). `sandbox` absent: `--isolation none`. */
export function renderRankScript(jobDir: string, argv: readonly string[], sandbox?: WrapperSandbox): string {
  checkRankRequest(jobDir, argv);
  const head = rankPreamble(jobDir, argv) + RANK_BINDING;
  if (sandbox === undefined) return head + UNSANDBOXED_LAUNCH;
  checkSandbox(sandbox);
  return head + sandboxSettings(sandbox) + PIN_CHECK + HIDE_PATHS + GPU_DEVICES + SANDBOXED_LAUNCH;
}
