#!/usr/bin/env bash
# Real-GPU check (issue 9, "On a real GPU"; docs/performance.md "Real-GPU check").
#
# For a bare host with an NVIDIA GPU, python3 with torch, and maybe node and bwrap. Four steps, each
# skipped with a line saying why when its tools are missing; a failing step never stops the others:
#
#   sampler   runs the exact nvidia-smi calls of worker/samplers/nvidia-sampler.ts and keeps their raw
#             stdout/stderr/exit code (sampler/*.stdout …): commit them as sampler test fixtures.
#   mig       (issue 39) prints and keeps `nvidia-smi -L` and `--query-gpu=mig.mode.current --format=csv`,
#             and where a card is in MIG mode `nvidia-smi mig -lgi`, `-lci`, `-lgip`, the default table's
#             MIG devices section, /proc/driver/nvidia-caps/mig-minors and the capability access files
#             (mig/*): the fixtures worker/samplers/mig-parse.ts is to be pinned to. Read-only: it never
#             runs -mig, -cgi, -dgi, -cci or -dci, so a card's MIG mode and instances stay as they are.
#             An nvidia-smi without MIG support prints its error into the row; nothing aborts.
#   workload  runs qualification/workload/qualify.py directly on every card torch sees, nccl backend,
#             with the GPU_BROKER_* binding the worker would give it (worker/task-io/env.ts).
#   broker    with node, bwrap and a built checkout: `gpu-broker start` (master + a bwrap-sandboxed
#             worker on the real cards), a 1-card `gpu-broker qualify`, and one task that prints
#             `nvidia-smi -L`, torch.cuda.device_count() and a CUDA matmul from inside the sandbox; both
#             run under the tasks' syscall filter (worker/sandbox/seccomp.ts; `Seccomp: 2` in the row),
#             so the first run on a real card shows whether it breaks CUDA or NCCL.
#
# Then it prints a short table (also in $OUT/summary.txt).
#
# Usage: scripts/device-check.sh            (output in $OUT if set, else ./device-check-out)
# Env:   DEVICE_CHECK_STEPS=sampler,mig,workload,broker   which steps to run (default all four)
#        NVIDIA_SMI=PATH                               nvidia-smi to run (default: found on PATH)
#        PYTHON=PATH                                   python3 with torch (default: found on PATH)
#        DEVICE_CHECK_TIMEOUT=SECONDS                  bound on the workload and on the broker step (900)
#        DEVICE_CHECK_BUILD=0                          never run `npm run build` (default: when dist/ is missing)
#        DEVICE_CHECK_MIG_MINORS=PATH                  mig-minors file (default /proc/driver/nvidia-caps/mig-minors)
#        DEVICE_CHECK_MIG_CAPS=DIR                     capability tree (default /proc/driver/nvidia/capabilities)

set -u -o pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-./device-check-out}
mkdir -p "$OUT" || { echo "device-check: cannot create $OUT" >&2; exit 1; }
OUT=$(cd "$OUT" && pwd)
STEPS=${DEVICE_CHECK_STEPS:-sampler,mig,workload,broker}
MIG_MINORS=${DEVICE_CHECK_MIG_MINORS:-/proc/driver/nvidia-caps/mig-minors}
MIG_CAPS=${DEVICE_CHECK_MIG_CAPS:-/proc/driver/nvidia/capabilities}
SMI=${NVIDIA_SMI:-nvidia-smi}
PY=${PYTHON:-python3}
LIMIT=${DEVICE_CHECK_TIMEOUT:-900}
LOG="$OUT/device-check.log"
: >"$LOG"

# The sampler's calls, field for field (NVIDIA_CORE_FIELDS, NVIDIA_HEALTH_FIELDS, NVIDIA_APP_FIELDS in
# worker/samplers/nvidia-parse.ts; test/integration/worker/samplers/device-check-script.test.ts keeps them equal).
CSV_FORMAT='--format=csv,noheader,nounits'
CORE_FIELDS='index,uuid,name,memory.total,memory.used,utilization.gpu,temperature.gpu,power.draw'
HEALTH_FIELDS='ecc.errors.uncorrected.volatile.total,remapped_rows.pending,remapped_rows.failure,retired_pages.pending'
APP_FIELDS='gpu_uuid,pid,process_name,used_memory'

ROWS=()
row() { ROWS+=("$1"$'\t'"$2"); }
say() { printf '[device-check] %s\n' "$*" | tee -a "$LOG" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }
want() { [[ ",$STEPS," == *",$1,"* ]]; }
# Runs a command with a bound when `timeout` exists.
bounded() {
  local seconds=$1
  shift
  if have timeout; then timeout "$seconds" "$@"; else "$@"; fi
}

# capture NAME CMD ARGS…: NAME.argv (one argument a line), NAME.stdout, NAME.stderr, NAME.exit.
capture() {
  local name=$1
  shift
  printf '%s\n' "$@" >"$name.argv"
  bounded 60 "$@" >"$name.stdout" 2>"$name.stderr"
  echo $? >"$name.exit"
}

# Builds dist/ once when node_modules is there and dist/ is not; succeeds when dist/ exists.
ensure_built() {
  if [[ ${DEVICE_CHECK_BUILD:-1} == 1 && ! -f "$REPO/dist/src/cli/main.js" && -d "$REPO/node_modules" ]] && have npm; then
    say 'building dist/ (npm run build)'
    (cd "$REPO" && npm run build --silent) >>"$LOG" 2>&1
  fi
  [[ -f "$REPO/dist/src/cli/main.js" ]]
}

step_sampler() {
  if ! have "$SMI"; then
    say "sampler: skipped: $SMI not found on PATH (set NVIDIA_SMI=PATH)"
    row 'sampler' "skipped: no $SMI"
    return
  fi
  local d="$OUT/sampler" field refused='' ok_fields=''
  mkdir -p "$d"
  say "sampler: capturing the nvidia sampler's calls into $d"
  # 1-3: exactly what NvidiaSampler.sample() runs, in its order.
  capture "$d/core" "$SMI" "--query-gpu=$CORE_FIELDS" "$CSV_FORMAT"
  capture "$d/health" "$SMI" "--query-gpu=uuid,$HEALTH_FIELDS" "$CSV_FORMAT"
  capture "$d/apps" "$SMI" "--query-compute-apps=$APP_FIELDS" "$CSV_FORMAT"
  # Each health field alone: shows which ones this driver refuses (the sampler drops those).
  for field in ${HEALTH_FIELDS//,/ }; do
    capture "$d/health-$field" "$SMI" "--query-gpu=uuid,$field" "$CSV_FORMAT"
    if [[ $(cat "$d/health-$field.exit") == 0 ]]; then ok_fields+="$field "; else refused+="$field "; fi
  done
  # Context for the sandbox's device nodes (worker/sandbox/devices.ts assumes index = minor number).
  capture "$d/list" "$SMI" -L
  capture "$d/pci" "$SMI" --query-gpu=index,pci.bus_id,uuid --format=csv,noheader
  capture "$d/query" "$SMI" -q
  ls -l /dev/nvidia* >"$d/dev-nodes.txt" 2>&1
  cat /proc/driver/nvidia/gpus/*/information >"$d/proc-driver-gpus.txt" 2>&1

  if [[ $(cat "$d/core.exit") != 0 ]]; then
    row 'sampler core query' "FAILED (exit $(cat "$d/core.exit")): $(head -c 200 "$d/core.stderr" "$d/core.stdout" | tr '\n' ' ')"
    return
  fi
  local cards first
  cards=$(grep -c . "$d/core.stdout")
  first=$(head -n 1 "$d/core.stdout" | awk -F', ' '{print $3 " (" $4 " MiB, " $8 " W)"}')
  row 'sampler cards' "$cards × $first"
  row 'sampler health fields' "ok: ${ok_fields:-none}${refused:+; refused: $refused}"
  row 'sampler compute apps' "exit $(cat "$d/apps.exit"), $(grep -c . "$d/apps.stdout") process(es)"
  # The real parser on the raw output, where a built checkout and node exist.
  if have node && ensure_built; then
    # shellcheck disable=SC2016 # JavaScript, not shell: its ${…} are template literals.
    if node --input-type=module -e '
      import { readFileSync } from "node:fs";
      const p = await import(process.argv[1]);
      const d = process.argv[2];
      const cards = p.parseNvidiaCoreCsv(readFileSync(`${d}/core.stdout`, "utf8"));
      const apps = p.parseComputeAppsCsv(readFileSync(`${d}/apps.stdout`, "utf8"));
      console.log(JSON.stringify({ cards, apps }, null, 2));
    ' "$REPO/dist/worker/samplers/nvidia-parse.js" "$d" >"$d/parsed.json" 2>"$d/parsed.stderr"; then
      row 'sampler parse' "ok (parsed.json)"
    else
      row 'sampler parse' "FAILED: $(head -c 200 "$d/parsed.stderr" | tr '\n' ' ')"
    fi
  else
    row 'sampler parse' 'not run (needs node and a built checkout: npm ci && npm run build)'
  fi
}

# show TITLE FILE: prints a captured output (at most 60 lines) to stdout and the log, for the session's tail.
show() {
  {
    printf '\n$ %s\n' "$1"
    head -n 60 "$2"
    [[ $(wc -l <"$2") -gt 60 ]] && printf '… (%s lines; all of it in %s)\n' "$(wc -l <"$2")" "$2"
  } | tee -a "$LOG"
}

# Read-only MIG discovery (issue 39): never -mig, -cgi, -dgi, -cci, -dci.
step_mig() {
  if ! have "$SMI"; then
    say "mig: skipped: $SMI not found on PATH (set NVIDIA_SMI=PATH)"
    row 'mig' "skipped: no $SMI"
    return
  fi
  local d="$OUT/mig" enabled total
  mkdir -p "$d"
  say "mig: reading MIG mode and instances into $d (read-only)"
  capture "$d/list" "$SMI" -L
  capture "$d/mode" "$SMI" --query-gpu=mig.mode.current --format=csv
  capture "$d/mode-index" "$SMI" --query-gpu=index,uuid,mig.mode.current --format=csv,noheader
  show 'nvidia-smi -L' "$d/list.stdout"
  show 'nvidia-smi --query-gpu=mig.mode.current --format=csv' "$d/mode.stdout"
  if [[ $(cat "$d/mode-index.exit") != 0 ]]; then
    row 'mig mode' "not readable (exit $(cat "$d/mode-index.exit")): $(cat "$d/mode-index.stdout" "$d/mode-index.stderr" | head -c 160 | tr '\n' ' ')"
    return
  fi
  total=$(grep -c . "$d/mode-index.stdout")
  enabled=$(grep -ci ',[[:space:]]*enabled[[:space:]]*$' "$d/mode-index.stdout")
  row 'mig mode' "enabled on $enabled of $total card(s)"
  [[ $enabled == 0 ]] && return
  capture "$d/lgi" "$SMI" mig -lgi
  capture "$d/lci" "$SMI" mig -lci
  capture "$d/lgip" "$SMI" mig -lgip
  capture "$d/table" "$SMI"
  cat "$MIG_MINORS" >"$d/mig-minors.txt" 2>&1
  # Every capability access file, one `path:Key: value` line each (DeviceFileMinor is the minor).
  bounded 60 grep -r . "$MIG_CAPS" >"$d/capabilities.txt" 2>&1
  ls -l /dev/nvidia-caps/ >"$d/dev-nvidia-caps.txt" 2>&1
  show 'nvidia-smi mig -lgi' "$d/lgi.stdout"
  show 'nvidia-smi mig -lci' "$d/lci.stdout"
  show 'nvidia-smi mig -lgip' "$d/lgip.stdout"
  sed -n '/MIG devices:/,$p' "$d/table.stdout" >"$d/table-mig-devices.txt"
  show 'nvidia-smi (the MIG devices section)' "$d/table-mig-devices.txt"
  show "$MIG_MINORS" "$d/mig-minors.txt"
  row 'mig instances' "lgi exit $(cat "$d/lgi.exit"): $(grep -c 'MIG ' "$d/lgi.stdout") GPU instance(s); lci exit $(cat "$d/lci.exit"): $(grep -c 'MIG ' "$d/lci.stdout") compute instance(s)"
  local parser="$REPO/dist/worker/samplers/mig-slices.js"
  if have node && ensure_built && [[ -f $parser ]]; then
    # shellcheck disable=SC2016 # JavaScript, not shell: its ${…} are template literals.
    if node --input-type=module -e '
      import { readFileSync } from "node:fs";
      const [parseFile, joinFile, d] = process.argv.slice(1);
      const p = await import(parseFile);
      const { joinMigSlices } = await import(joinFile);
      const read = (name) => { try { return readFileSync(`${d}/${name}`, "utf8"); } catch { return ""; } };
      const list = p.parseNvidiaList(read("list.stdout"));
      const modes = p.parseMigModeCsv(read("mode-index.stdout"));
      const lgi = p.parseGpuInstances(read("lgi.stdout"));
      const lci = p.parseComputeInstances(read("lci.stdout"));
      const devices = p.parseMigDevicesTable(read("table.stdout"));
      const minors = p.parseMigMinors(read("mig-minors.txt"));
      const joined = joinMigSlices({ list, modes: modes.rows, gpuInstances: lgi.rows, computeInstances: lci.rows, devices: devices.rows, minors: minors.minors });
      const problems = [list, modes, lgi, lci, devices, minors, joined].flatMap((x) => x.problems);
      console.log(JSON.stringify({ slices: joined.slices, migCards: joined.migCards, problems }, null, 2));
    ' "$REPO/dist/worker/samplers/mig-parse.js" "$parser" "$d" >"$d/parsed.json" 2>"$d/parsed.stderr"; then
      row 'mig parse' "$(grep -c '"id": ' "$d/parsed.json") slice(s), $(grep -c '"code": ' "$d/parsed.json") problem(s) (mig/parsed.json)"
    else
      row 'mig parse' "FAILED: $(head -c 200 "$d/parsed.stderr" | tr '\n' ' ')"
    fi
  else
    row 'mig parse' 'not run (needs node and a build with worker/samplers/mig-slices.js: npm run build)'
  fi
}

# Prints the number of CUDA devices torch sees, or nothing when torch cannot be imported.
torch_devices() {
  "$PY" -c 'import torch; print(torch.cuda.device_count())' 2>>"$LOG"
}

step_workload() {
  if ! have "$PY"; then
    say "workload: skipped: $PY not found (set PYTHON=PATH)"
    row 'workload (direct, nccl)' "skipped: no $PY"
    return
  fi
  local n
  n=$(torch_devices)
  if [[ -z $n ]]; then
    say "workload: skipped: $PY cannot import torch"
    row 'workload (direct, nccl)' 'skipped: no torch'
    return
  fi
  if [[ $n == 0 ]]; then
    say 'workload: skipped: torch sees no CUDA device'
    row 'workload (direct, nccl)' 'skipped: torch.cuda.device_count() = 0'
    return
  fi
  local d="$OUT/workload" ids uuids rc
  mkdir -p "$d/out"
  ids=$(seq -s, 0 $((n - 1)))
  uuids=''
  if [[ -s "$OUT/sampler/core.stdout" ]]; then
    uuids=$(head -n "$n" "$OUT/sampler/core.stdout" | awk -F', ' '{print $2}' | paste -sd, -)
  fi
  say "workload: qualify.py on $n card(s) ($ids), nccl"
  # The binding the worker gives a task (worker/task-io/env.ts), with ids made up for this run.
  (
    cd "$d" &&
      CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES="$ids" HIP_VISIBLE_DEVICES="$ids" \
        GPU_BROKER_TASK_ID=device-check-task GPU_BROKER_EXECUTION_ID=device-check-exec \
        GPU_BROKER_ASSIGNMENT_ID=device-check-asg GPU_BROKER_LEASE_EPOCH=1 \
        GPU_BROKER_GPU_IDS="$ids" GPU_BROKER_GPU_UUIDS="$uuids" GPU_BROKER_OUTPUT_DIR="$d/out" \
        GPU_BROKER_WORKER_ID="$(hostname)" GPU_BROKER_SIMULATED=0 \
        bounded "$LIMIT" "$PY" "$REPO/qualification/workload/qualify.py" >"$d/stdout.log" 2>"$d/stderr.log"
  )
  rc=$?
  echo "$rc" >"$d/exit"
  if [[ ! -s "$d/out/qualification.json" ]]; then
    row 'workload (direct, nccl)' "exit $rc, no qualification.json: $(tail -n 3 "$d/stderr.log" | tr '\n' ' ')"
    return
  fi
  row 'workload (direct, nccl)' "exit $rc; $("$PY" - "$d/out/qualification.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
ranks = d.get("ranks") or []
n = len(d.get("gpu_ids", [])) or len(ranks)
busbw = [r["bandwidth"]["busbw_gbps"] for r in ranks if r.get("bandwidth")]
algbw = [r["bandwidth"]["algbw_gbps"] for r in ranks if r.get("bandwidth")]
s = [r["allreduce_sum"]["value"] for r in ranks if r.get("rank") == 0]
print(f'{d.get("backend")} on {", ".join(sorted(set(d.get("device_names", []))))}; '
      f'all_reduce {s[0] if s else None}/{n * (n + 1) // 2}; '
      f'gemm {"ok" if ranks and all(r["gemm"]["ok"] for r in ranks) else "FAILED"}; '
      f'busbw {min(busbw) if busbw and None not in busbw else "n/a"} GB/s'
      f'{"" if busbw and None not in busbw else " (algbw %s)" % (min(algbw) if algbw else "n/a")}')
EOF
)"
}

# The broker step's HTTP calls: python3 (always on these hosts) with the master's CA.
api() {
  "$PY" - "$@" <<'EOF'
import json, ssl, sys, urllib.request, uuid
method, url, token, ca = sys.argv[1:5]
body = sys.argv[5] if len(sys.argv) > 5 else None
req = urllib.request.Request(url, method=method, data=body.encode() if body else None)
req.add_header("Authorization", f"Bearer {token}")
if body:
    req.add_header("Content-Type", "application/json")
    req.add_header("Idempotency-Key", str(uuid.uuid4()))
ctx = ssl.create_default_context(cafile=ca) if ca else None
try:
    with urllib.request.urlopen(req, context=ctx, timeout=60) as r:
        print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.read().decode())
    sys.exit(1)
EOF
}
# json FILE_OR_- EXPR: prints a Python expression over the parsed document `d`.
json_get() {
  "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1]) if sys.argv[1] != "-" else sys.stdin); print(eval(sys.argv[2]))' "$@"
}

step_broker() {
  local cli="$REPO/dist/src/cli/main.js"
  if ! have node; then
    say 'broker: skipped: node not found'
    row 'broker (start + qualify)' 'skipped: no node'
    return
  fi
  if ! have bwrap; then
    say 'broker: skipped: bwrap not found (Debian/Ubuntu: apt-get install bubblewrap)'
    row 'broker (start + qualify)' 'skipped: no bwrap'
    return
  fi
  if ! ensure_built; then
    say 'broker: skipped: no built checkout (run npm ci && npm run build)'
    row 'broker (start + qualify)' 'skipped: not built'
    return
  fi
  if [[ -z $(torch_devices) ]]; then
    say "broker: skipped: $PY cannot import torch"
    row 'broker (start + qualify)' 'skipped: no torch'
    return
  fi
  local d="$OUT/broker" py pid url ca wid op agent reviewer
  rm -rf "$d" && mkdir -p "$d"
  py=$(readlink -f "$(command -v "$PY")")
  case $py in
  /home/* | /root/*) say "broker: note: $py is under /home or /root, which the sandbox hides: the task cannot run it" ;;
  esac
  # The qualification runs under this python; the probe task is /bin/sh.
  printf '{"qualification_python": "%s", "policy": {"executables": [{"path": "/bin/sh"}]}}\n' "$py" >"$d/config.json"
  say "broker: gpu-broker start (master + bwrap-sandboxed worker on the real cards) in $d"
  node "$cli" start --data-dir "$d/data" --config "$d/config.json" --listen 127.0.0.1:0 \
    --gpus nvidia --isolation bwrap --json >"$d/start.json" 2>"$d/start.log" &
  pid=$!
  for _ in $(seq 1 60); do
    [[ -s "$d/start.json" ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
  done
  if [[ ! -s "$d/start.json" ]]; then
    row 'broker (start + qualify)' "start failed: $(tail -n 3 "$d/start.log" | tr '\n' ' ')"
    kill -INT "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return
  fi
  url=$(json_get "$d/start.json" 'd["url"]')
  ca=$(json_get "$d/start.json" 'd["ca_file"] or ""')
  wid=$(json_get "$d/start.json" 'd["worker_id"]')
  op=$(cat "$d/data/operator.token")
  agent=$(cat "$(json_get "$d/start.json" 'd["agent_token_file"]')")
  reviewer=$(cat "$(json_get "$d/start.json" 'd["reviewer_token_file"]')")
  # The worker's cards as the master sees them (the real sampler, through the WSS protocol).
  sleep 3
  api GET "$url/api/v1/cards" "$op" "$ca" >"$d/cards.json" 2>>"$LOG"

  # The probe first: a failed qualification leaves its cards cordoned for the operator to look at.
  say 'broker: a task that lists the devices it sees from inside the sandbox'
  local script spec created pidp rev task state
  # Under the syscall filter (worker/sandbox/seccomp.ts, Seccomp: 2): a CUDA op shows whether it breaks device work.
  script="nvidia-smi -L; echo nodes: \$(ls /dev | grep '^nvidia' | tr '\\n' ' '); grep '^Seccomp:' /proc/self/status; $py -c 'import torch; print(\"torch.cuda.device_count() =\", torch.cuda.device_count()); print(\"cuda op =\", float((torch.ones(64, 64, device=\"cuda\") @ torch.ones(64, 64, device=\"cuda\")).sum()))'"
  spec=$("$PY" -c 'import json,sys; print(json.dumps({"spec": {"title": "device-check: devices inside the sandbox", "objective": "Show which GPUs a sandboxed task sees.", "success_criteria": "nvidia-smi -L lists one GPU and torch counts one device.", "cards": {"count": 1}, "worker": sys.argv[1], "runtime": {"kind": "process", "argv": ["/bin/sh", "-c", sys.argv[2]]}, "outputs": [], "time_limit_seconds": 300}}))' "$wid" "$script")
  created=$(api POST "$url/api/v1/proposals" "$agent" "$ca" "$spec" 2>>"$LOG")
  echo "$created" >"$d/probe-proposal.json"
  pidp=$(json_get - 'd.get("proposal_id", "")' <<<"$created" 2>>"$LOG")
  rev=$(json_get - 'd.get("revision_id", "")' <<<"$created" 2>>"$LOG")
  if [[ -z $pidp ]]; then
    row 'devices inside sandbox' "proposal refused: $(head -c 300 "$d/probe-proposal.json")"
  else
    api POST "$url/api/v1/proposals/$pidp/confirm" "$agent" "$ca" "{\"revision_id\": \"$rev\"}" >"$d/probe-confirm.json" 2>>"$LOG"
    api POST "$url/api/v1/proposals/$pidp/reviews" "$reviewer" "$ca" \
      "{\"revision_id\": \"$rev\", \"decision\": \"APPROVE\", \"comments\": \"device-check probe\"}" >"$d/probe-review.json" 2>>"$LOG"
    task=$(json_get "$d/probe-review.json" 'd.get("task_id", "")' 2>>"$LOG")
    state=''
    for _ in $(seq 1 150); do
      api GET "$url/api/v1/tasks/$task" "$agent" "$ca" >"$d/probe-task.json" 2>>"$LOG"
      state=$(json_get "$d/probe-task.json" 'd["task"]["state"]' 2>>"$LOG")
      [[ $state == COMPLETED || $state == FAILED || $state == CANCELLED ]] && break
      sleep 2
    done
    {
      api GET "$url/api/v1/tasks/$task/logs?stream=stdout" "$agent" "$ca" >"$d/probe-stdout.json"
      api GET "$url/api/v1/tasks/$task/logs?stream=stderr" "$agent" "$ca" >"$d/probe-stderr.json"
      json_get "$d/probe-stdout.json" 'd.get("data", "")' >"$d/probe-stdout.txt"
    } 2>>"$LOG"

    [[ $state == FAILED ]] && state="FAILED ($(json_get "$d/probe-task.json" 'd["task"].get("failure_reason")' 2>>"$LOG"))"
    [[ $state == QUEUED ]] && state="QUEUED ($(json_get "$d/probe-task.json" 'd["task"].get("reason")' 2>>"$LOG"))"
    row 'devices inside sandbox' "task ${state:-unknown}: $(grep -c '^GPU ' "$d/probe-stdout.txt") GPU(s) in nvidia-smi -L; $(grep -h '^nodes:\|device_count\|^Seccomp:\|^cuda op' "$d/probe-stdout.txt" | tr '\n' ' ')"
  fi
  say "broker: gpu-broker qualify --worker $wid --cards 1"
  GPU_BROKER_URL=$url GPU_BROKER_TOKEN=$op GPU_BROKER_CA_FILE=$ca \
    bounded "$LIMIT" node "$cli" qualify --worker "$wid" --cards 1 --json >"$d/qualify.json" 2>"$d/qualify.log"
  echo $? >"$d/qualify.exit"
  if [[ -s "$d/qualify.json" ]]; then
    row 'qualify 1 card (sandboxed)' "$(json_get "$d/qualify.json" '"%s; isolation %s; busbw %s; algbw %s GB/s; failed checks: %s" % (d.get("verdict"), d.get("worker", {}).get("isolation"), *((lambda s: (s.get("busbw_gbps"), s.get("algbw_gbps")))((d.get("rungs") or [{}])[0].get("summary") or {})), (lambda f: "none" if not f else "%d, first: %s" % (len(f), f[0][:160]))(d.get("failed_checks") or []))' 2>&1)"
  else
    row 'qualify 1 card (sandboxed)' "no evidence: $(tail -n 3 "$d/qualify.log" | tr '\n' ' ')"
  fi

  kill -INT "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}

want sampler && step_sampler
want mig && step_mig
want workload && step_workload
want broker && step_broker

{
  echo
  echo "device-check on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ); outputs in $OUT"
  for r in "${ROWS[@]}"; do printf '  %-28s %s\n' "${r%%$'\t'*}" "${r#*$'\t'}"; done
} | tee "$OUT/summary.txt"
