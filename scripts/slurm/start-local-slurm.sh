#!/usr/bin/env bash
# Copied from ../shared/reference/slurm/start-local-slurm.sh (the issue 12 reference scripts), then
# extended for gpu-broker's tests: SLURM_NODE_NAMES (several slurmd on one host, for multi-node jobs),
# SLURMCTLD_PORT / SLURMD_PORT (a second cluster beside a running one), SLURM_NODE_GRES /
# SLURM_GRES_CONF (typed GRES: MIG slices with stand-in device nodes). With the defaults it writes the
# same configuration as the reference. test/support/slurm.ts drives it; docs/slurm.md has the findings.
#
# start-local-slurm.sh -- start a single-node Slurm "cluster" (munged + slurmctld
# + slurmd) without systemd, with a node that advertises fake GPUs through GRES.
#
# Tested on Debian 12 (bookworm), slurm-wlm 22.05.8-4+deb12u3, munge 0.5.15.
# Run as root.  Idempotent-ish: refuses to start a daemon whose pid file points
# at a live process.  Stop everything it started with stop-local-slurm.sh.
#
# Environment knobs (all optional):
#   SLURM_LOCAL_DIR   runtime dir (state, spool, logs, pid files) [/tmp/slurm-local]
#   SLURM_CONF_DIR    where slurm.conf + gres.conf are written      [/etc/slurm]
#                     (/etc/slurm is the compiled-in default, so sinfo/sbatch/srun
#                     work without SLURM_CONF; any other dir => export SLURM_CONF)
#   SLURM_NODE_NAME   NodeName of the single node                  [localhost]
#   SLURM_NODE_NAMES  several node names ("n1 n2"): one slurmd per name on this host
#                     (NodeAddr=127.0.0.1, Port=SLURMD_PORT+i, fake GPUs in
#                     $SLURM_LOCAL_DIR/dev/<name>/, pid/log/spool per node via %n);
#                     SLURM_FAKE_GPUS and SLURM_CPUS are per node [$SLURM_NODE_NAME]
#   SLURMCTLD_PORT    slurmctld port [6817]
#   SLURMD_PORT       slurmd port (of the first node) [6818]
#   SLURM_NODE_GRES   the node's Gres= in slurm.conf [gpu:$SLURM_FAKE_GPUS]; typed GRES
#                     such as gpu:3g.40gb:1,gpu:1g.10gb:2 (MIG slices) with SLURM_GRES_CONF
#   SLURM_GRES_CONF   a file copied as gres.conf instead of the generated one; its
#                     File=/MultipleFiles= device nodes are the caller's to make
#   SLURM_FAKE_GPUS   number of fake GPUs in GRES                   [8]
#   SLURM_GRES_MODE   mknod   -> gres.conf File=$SLURM_LOCAL_DIR/dev/nvidia[0-N], fake
#                                char devices (c 195 N); Slurm binds devices and
#                                sets CUDA_VISIBLE_DEVICES. Falls back to symlink.
#                     symlink -> same, but nvidiaN are symlinks to /dev/null
#                     files   -> same, but regular files (rejected by slurmd:
#                                no CUDA_VISIBLE_DEVICES) -- for reference only
#                     count   -> gres.conf Count=N, no File= -- node goes INVAL in
#                                22.05 (file-less GPUs are dropped); reference only
#                     [mknod]
#   SLURM_CPUS        CPUs advertised by the node [nproc]. More than the real
#                     count adds SlurmdParameters=config_overrides (oversubscribe).
#   SLURM_KEEP_STATE  1 -> keep slurmctld state (jobs, node drain reasons) from a
#                     previous run; default 0 = slurmctld -c (clean start)
#   SLURM_EXTRA_CONF  extra slurm.conf lines (e.g. SchedulerParameters=batch_sched_delay=0)
#   SLURM_INSTALL     1 -> apt-get install the packages if slurmctld is missing [1]
#   SLURM_START_TIMEOUT seconds to wait for the node to become idle [60]
set -euo pipefail

RUN_DIR=${SLURM_LOCAL_DIR:-/tmp/slurm-local}
CONF_DIR=${SLURM_CONF_DIR:-/etc/slurm}
NODE=${SLURM_NODE_NAME:-localhost}
read -r -a NODES <<<"${SLURM_NODE_NAMES:-$NODE}"
[ ${#NODES[@]} -ge 1 ] || NODES=("$NODE")
MULTI=0; [ ${#NODES[@]} -gt 1 ] && MULTI=1
CTLD_PORT=${SLURMCTLD_PORT:-6817}
SLURMD_PORT0=${SLURMD_PORT:-6818}
NGPU=${SLURM_FAKE_GPUS:-8}
GRES_MODE=${SLURM_GRES_MODE:-mknod}
REAL_CPUS=$(nproc)
CPUS=${SLURM_CPUS:-$REAL_CPUS}
TIMEOUT=${SLURM_START_TIMEOUT:-60}
NODE_GRES=${SLURM_NODE_GRES:-gpu:$NGPU}

log() { printf '[start-local-slurm %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root"

# --- 0. packages ------------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
   || ! command -v munged >/dev/null || ! command -v sbatch >/dev/null; then
  if [ "${SLURM_INSTALL:-1}" = 1 ]; then
    log "installing slurmctld slurmd slurm-client munge (apt-get)"
    # policy-rc.d (docker images) or a missing init system makes the postinst
    # "invoke-rc.d ... start" a no-op; that is fine, we start daemons ourselves.
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      slurmctld slurmd slurm-client munge >&2
  else
    die "slurm/munge binaries missing and SLURM_INSTALL=0"
  fi
fi

mkdir -p "$RUN_DIR"/{state,spool,log,dev} "$CONF_DIR"
chmod 755 "$RUN_DIR"

alive() {  # alive PIDFILE EXPECTED_COMM -> 0 if pidfile names a live process with that comm
  local pf=$1 comm=$2 pid
  [ -s "$pf" ] || return 1
  pid=$(tr -dc '0-9' <"$pf")
  [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$comm" ]
}

# --- 1. munge ---------------------------------------------------------------
MUNGE_PID=/run/munge/munged.pid
if [ ! -s /etc/munge/munge.key ]; then
  log "creating /etc/munge/munge.key"
  install -d -o munge -g munge -m 0700 /etc/munge
  if command -v mungekey >/dev/null; then
    mungekey --create --keyfile=/etc/munge/munge.key
  else
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
fi
# /run/munge is normally created by systemd-tmpfiles / the init script.
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/log/munge
install -d -o munge -g munge -m 0711 /var/lib/munge
if [ -e "$RUN_DIR/munged.ours" ] && alive "$RUN_DIR/munged.pid" munged; then
  log "munged already running (pid $(cat "$RUN_DIR/munged.pid"), started by this script)"
elif munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  log "munged already answering on /run/munge/munge.socket.2 (not ours); not starting another"
  rm -f "$RUN_DIR/munged.ours"
else
  log "starting munged as user munge"
  # munged forks itself and writes its pid file; run it as the munge user
  # (as root it would need --force).
  runuser -u munge -- /usr/sbin/munged --pid-file="$MUNGE_PID"
  for _ in $(seq 50); do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
    sleep 0.1
  done
  munge -n | unmunge >/dev/null || die "munged did not come up (see /var/log/munge/munged.log)"
  cp "$MUNGE_PID" "$RUN_DIR/munged.pid"
  touch "$RUN_DIR/munged.ours"
fi

# --- 2. config --------------------------------------------------------------
# Memory: take what slurmd itself detects, so the node is not drained for
# "Low RealMemory".
HW=$(slurmd -C | head -n 1)
REALMEM=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$HW")
[ -n "$REALMEM" ] || REALMEM=1000
# several slurmd share the host's memory
[ "$MULTI" = 1 ] && REALMEM=$((REALMEM / ${#NODES[@]}))
EXTRA=""
if [ "$CPUS" -eq "$REAL_CPUS" ]; then
  # the topology slurmd detects (avoids "Node reconfigured socket/core boundaries")
  TOPO=$(grep -o 'CPUs=.*ThreadsPerCore=[0-9]*' <<<"$HW" || echo "CPUs=$CPUS")
else
  TOPO="CPUs=$CPUS"
  # More CPUs than the hardware: without this slurmctld drains the node
  # ("Low socket*core*thread count").
  [ "$CPUS" -gt "$REAL_CPUS" ] && EXTRA="SlurmdParameters=config_overrides"
fi

if [ -f "$CONF_DIR/slurm.conf" ] && ! grep -q 'written by start-local-slurm.sh' "$CONF_DIR/slurm.conf"; then
  cp -n "$CONF_DIR/slurm.conf" "$CONF_DIR/slurm.conf.before-local-slurm"
fi

if [ "$MULTI" = 1 ]; then
  SLURMD_PIDNAME='slurmd.%n.pid'; SLURMD_SPOOL='spool/%n'; SLURMD_LOGNAME='slurmd.%n.log'
  NODE_LINES=""
  i=0
  for n in "${NODES[@]}"; do
    NODE_LINES+="NodeName=$n NodeAddr=127.0.0.1 NodeHostname=$(hostname) Port=$((SLURMD_PORT0 + i)) $TOPO RealMemory=$REALMEM Gres=$NODE_GRES State=UNKNOWN"$'\n'
    mkdir -p "$RUN_DIR/spool/$n"
    i=$((i + 1))
  done
else
  SLURMD_PIDNAME='slurmd.pid'; SLURMD_SPOOL='spool'; SLURMD_LOGNAME='slurmd.log'
  NODE_LINES="NodeName=$NODE NodeAddr=127.0.0.1 $TOPO RealMemory=$REALMEM Gres=$NODE_GRES State=UNKNOWN"
fi

cat >"$CONF_DIR/slurm.conf" <<EOF
# written by start-local-slurm.sh -- single-node test cluster, fake GPUs
ClusterName=local
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT0
SlurmctldPidFile=$RUN_DIR/slurmctld.pid
SlurmdPidFile=$RUN_DIR/$SLURMD_PIDNAME
StateSaveLocation=$RUN_DIR/state
SlurmdSpoolDir=$RUN_DIR/$SLURMD_SPOOL
SlurmctldLogFile=$RUN_DIR/log/slurmctld.log
SlurmdLogFile=$RUN_DIR/log/$SLURMD_LOGNAME
SlurmctldDebug=info
SlurmdDebug=${SLURMD_DEBUG:-info}
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$RUN_DIR/log/jobcomp.log
$EXTRA
${SLURM_EXTRA_CONF:-}
$NODE_LINES
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF

LAST=$((NGPU - 1))
rm -f "$RUN_DIR"/dev/nvidia*
case "$GRES_MODE" in
  mknod|symlink)
    # gres/gpu stat()s every File= and rejects anything that is not a char or
    # block device ("... is not a valid character or block device, fix your
    # gres.conf"); a rejected File= gives no CUDA_VISIBLE_DEVICES.  Fake
    # /dev/nvidiaN nodes (major 195 like the real driver) are enough: nothing
    # ever opens them unless ConstrainDevices=yes (cgroup) is configured.
    for i in $(seq 0 "$LAST"); do
      if [ "$GRES_MODE" = mknod ] && mknod "$RUN_DIR/dev/nvidia$i" c 195 "$i" 2>/dev/null; then :
      else
        # no CAP_MKNOD (some containers): a symlink to /dev/null also stat()s
        # as a char device
        [ "$GRES_MODE" = mknod ] && log "mknod failed; falling back to symlinks to /dev/null"
        GRES_MODE=symlink
        ln -sf /dev/null "$RUN_DIR/dev/nvidia$i"
      fi
    done
    cat >"$CONF_DIR/gres.conf" <<EOF
# written by start-local-slurm.sh (fake GPUs, mode $GRES_MODE)
AutoDetect=off
NodeName=$NODE Name=gpu File=$RUN_DIR/dev/nvidia[0-$LAST]
EOF
    ;;
  files)
    # regular files: slurmd logs an error per file; no CUDA_VISIBLE_DEVICES
    for i in $(seq 0 "$LAST"); do : >"$RUN_DIR/dev/nvidia$i"; done
    cat >"$CONF_DIR/gres.conf" <<EOF
# written by start-local-slurm.sh (fake GPUs, mode files)
AutoDetect=off
NodeName=$NODE Name=gpu File=$RUN_DIR/dev/nvidia[0-$LAST]
EOF
    ;;
  count)
    # DOES NOT WORK with Slurm 22.05: slurmd logs "Removing file-less GPU
    # gpu:(null) from final GRES list", reports 0 GPUs and slurmctld sets the
    # node INVAL/DRAIN "gres/gpu count reported lower than configured (0 < 8)".
    # Kept only to reproduce that finding.
    cat >"$CONF_DIR/gres.conf" <<EOF
# written by start-local-slurm.sh (fake GPUs, mode count)
AutoDetect=off
NodeName=$NODE Name=gpu Count=$NGPU
EOF
    ;;
  *) die "SLURM_GRES_MODE must be mknod, symlink, files or count" ;;
esac
if [ "$MULTI" = 1 ]; then
  [ "$GRES_MODE" = mknod ] || [ "$GRES_MODE" = symlink ] || die "SLURM_NODE_NAMES needs SLURM_GRES_MODE mknod or symlink"
  {
    echo "# written by start-local-slurm.sh (fake GPUs, mode $GRES_MODE, one device dir per node)"
    echo "AutoDetect=off"
    for n in "${NODES[@]}"; do
      mkdir -p "$RUN_DIR/dev/$n"; rm -f "$RUN_DIR/dev/$n"/nvidia*
      for i in $(seq 0 "$LAST"); do
        if [ "$GRES_MODE" = mknod ]; then mknod "$RUN_DIR/dev/$n/nvidia$i" c 195 "$i"
        else ln -sf /dev/null "$RUN_DIR/dev/$n/nvidia$i"; fi
      done
      echo "NodeName=$n Name=gpu File=$RUN_DIR/dev/$n/nvidia[0-$LAST]"
    done
  } >"$CONF_DIR/gres.conf"
fi
if [ -n "${SLURM_GRES_CONF:-}" ]; then
  # the caller's gres.conf (typed GRES, MultipleFiles= of stand-in MIG nodes) replaces ours
  cp "$SLURM_GRES_CONF" "$CONF_DIR/gres.conf"
fi
[ "$CONF_DIR" = /etc/slurm ] || { export SLURM_CONF="$CONF_DIR/slurm.conf"; log "NOTE: export SLURM_CONF=$SLURM_CONF for clients"; }

# --- 3. daemons -------------------------------------------------------------
if alive "$RUN_DIR/slurmctld.pid" slurmctld; then
  log "slurmctld already running (pid $(cat "$RUN_DIR/slurmctld.pid")); config changes need stop-local-slurm.sh + restart"
else
  # daemonizes itself and writes SlurmctldPidFile.
  # -c: start from a clean state.  Without it a node DRAIN recorded by an
  # earlier run (e.g. "gres/gpu count reported lower than configured (0 < 8)")
  # is recovered from StateSaveLocation and the node never becomes idle.
  # SLURM_KEEP_STATE=1 keeps jobs/node state instead (-i: ignore bad state files).
  if [ "${SLURM_KEEP_STATE:-0}" = 1 ]; then ctld_opt=-i; else ctld_opt=-c; fi
  log "starting slurmctld $ctld_opt"
  slurmctld -f "$CONF_DIR/slurm.conf" $ctld_opt
fi
for n in "${NODES[@]}"; do
  if [ "$MULTI" = 1 ]; then pf="$RUN_DIR/slurmd.$n.pid"; else pf="$RUN_DIR/slurmd.pid"; fi
  if alive "$pf" slurmd; then
    log "slurmd -N $n already running (pid $(cat "$pf"))"
  else
    log "starting slurmd -N $n"
    # -N: the node name is not the machine's hostname
    slurmd -f "$CONF_DIR/slurm.conf" -N "$n"
  fi
done

# --- 4. wait for idle -------------------------------------------------------
NODE_CSV=$(IFS=,; echo "${NODES[*]}")
log "waiting up to ${TIMEOUT}s for node(s) $NODE_CSV to become idle"
state=""
for _ in $(seq $((TIMEOUT * 4))); do
  state=$(sinfo -h -N -n "$NODE_CSV" -o '%t' 2>/dev/null | sort -u | tr '\n' ' ' | sed 's/ $//' || true)
  [ "$state" = idle ] && [ "$(sinfo -h -N -n "$NODE_CSV" -o '%N' 2>/dev/null | sort -u | wc -l)" = ${#NODES[@]} ] && break
  sleep 0.25
done
if [ "$state" != idle ]; then
  sinfo -N -l >&2 || true
  scontrol show node >&2 || true
  tail -n 20 "$RUN_DIR/log/slurmctld.log" "$RUN_DIR"/log/slurmd*.log >&2 || true
  die "node(s) $NODE_CSV are '$state', not idle (daemons left running for inspection; stop-local-slurm.sh ends them)"
fi
log "up: slurmctld pid $(cat "$RUN_DIR/slurmctld.pid"), slurmd pid(s) $(cat "$RUN_DIR"/slurmd*.pid | tr '\n' ' ')"
sinfo -o '%P %a %l %D %t %N %G %c %m'
