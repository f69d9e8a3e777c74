#!/usr/bin/env bash
# Copied from ../shared/reference/slurm/stop-local-slurm.sh (issue 12 reference scripts); extended to
# stop every slurmd of a multi-node start (slurmd.<node>.pid, see start-local-slurm.sh SLURM_NODE_NAMES).
# stop-local-slurm.sh -- stop the daemons started by start-local-slurm.sh.
# Ends only the pids recorded in its pid files, and only if /proc/PID/comm
# still names the expected program (guards against pid reuse).  munged is
# stopped only if start-local-slurm.sh started it.
#   SLURM_LOCAL_DIR  runtime dir [/tmp/slurm-local]
#   SLURM_LOCAL_CLEAN=1  also delete the runtime dir (state, logs)
set -uo pipefail
RUN_DIR=${SLURM_LOCAL_DIR:-/tmp/slurm-local}

log() { printf '[stop-local-slurm] %s\n' "$*" >&2; }

stop_pidfile() {  # stop_pidfile PIDFILE COMM
  local pf=$1 comm=$2 pid
  if [ ! -s "$pf" ]; then log "$comm: no pid file $pf"; return 0; fi
  pid=$(tr -dc '0-9' <"$pf")
  if [ -z "$pid" ] || [ ! -r "/proc/$pid/comm" ] || [ "$(cat "/proc/$pid/comm")" != "$comm" ]; then
    log "$comm: pid '${pid}' from $pf is not running (or is not $comm); skipping"
    rm -f "$pf"; return 0
  fi
  log "$comm: SIGTERM $pid"
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 100); do            # up to 10 s
    [ -d "/proc/$pid" ] || { rm -f "$pf"; log "$comm: stopped"; return 0; }
    sleep 0.1
  done
  log "$comm: still alive after 10s, SIGKILL $pid"
  kill -KILL "$pid" 2>/dev/null
  sleep 0.2; rm -f "$pf"
}

# slurmd first (it also ends its job steps' slurmstepd on shutdown), then ctld.
for pf in "$RUN_DIR"/slurmd.pid "$RUN_DIR"/slurmd.*.pid; do
  [ -e "$pf" ] || continue
  stop_pidfile "$pf" slurmd
done
stop_pidfile "$RUN_DIR/slurmctld.pid" slurmctld
if [ -e "$RUN_DIR/munged.ours" ]; then
  stop_pidfile "$RUN_DIR/munged.pid" munged && rm -f "$RUN_DIR/munged.ours" /run/munge/munged.pid
else
  log "munged: not started by start-local-slurm.sh; leaving it alone"
fi
if [ "${SLURM_LOCAL_CLEAN:-0}" = 1 ]; then rm -rf "$RUN_DIR"; log "removed $RUN_DIR"; fi
