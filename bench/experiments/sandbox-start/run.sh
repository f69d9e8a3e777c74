#!/usr/bin/env bash
# ADR 0036 amendment and ADR 0038: whole-machine CPU per task start, bwrap + setpriv + env against a
# launcher entering a prepared root (launch.c) and the native sandbox (worker/sandbox/native/, which builds
# the root per task). Needs root, gcc and bwrap; prints one row per variant.
#   bash bench/experiments/sandbox-start/run.sh [TASKS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
n=${1:-1000}
work=$(mktemp -d)
trap 'kill "$holder" 2>/dev/null || true; rm -rf "$work"' EXIT
gcc -O2 -o "$work/launch" "$here/launch.c"
gcc -O2 -o "$work/drive" "$here/drive.c"
native_src="$here/../../../worker/sandbox/native/gpu-broker-sandbox.c"
gcc -O2 -static -o "$work/native" "$native_src" 2>/dev/null || gcc -O2 -o "$work/native" "$native_src"
mkdir "$work/task"
SYS=(--ro-bind /usr /usr --ro-bind /etc /etc --ro-bind /opt /opt --ro-bind /var /var --ro-bind /sys /sys
  --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --symlink usr/sbin /sbin)
bwrap --die-with-parent --unshare-pid --unshare-ipc --unshare-uts --unshare-net "${SYS[@]}" --proc /proc \
  --dev /dev --tmpfs /tmp --dir /task --info-fd 3 -- /usr/bin/sleep 3600 3>"$work/info.json" &
holder=$!
for _ in $(seq 50); do [ -s "$work/info.json" ] && break; sleep 0.1; done
hp=$(sed -n 's/.*"child-pid": *\([0-9]*\).*/\1/p' "$work/info.json")
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
# whole-machine busy ms per task (USER_HZ = 100: one tick is 10 ms)
row() {
  local name=$1 count=$2
  shift 2
  sleep 1
  local a b
  a=$(busy)
  "$@"
  b=$(busy)
  awk -v t=$(((b - a) * 10)) -v n="$count" -v name="$name" 'BEGIN { printf "| %s | %.1f |\n", name, t / n }'
}
echo "| start of one /bin/true | whole-machine CPU ms per task |"
echo "| --- | --- |"
row "plain fork + exec" "$n" "$work/drive" "$n" /bin/true
row "launcher, shared netns" "$n" "$work/drive" "$n" "$work/launch" "$hp" "$work/task" /bin/true
row "launcher + init" "$n" env INIT=1 "$work/drive" "$n" "$work/launch" "$hp" "$work/task" /bin/true
row "launcher + init + fresh netns" "$n" env INIT=1 FRESHNET=1 "$work/drive" "$n" "$work/launch" "$hp" "$work/task" /bin/true
m=$((n / 3))
row "bwrap + setpriv + env (today)" "$m" "$work/drive" "$m" /usr/bin/bwrap --die-with-parent --new-session \
  --unshare-pid --unshare-ipc --unshare-uts --unshare-net "${SYS[@]}" --proc /proc --dev /dev --tmpfs /dev/shm \
  --tmpfs /tmp --bind "$work/task" /task --chdir /task -- /usr/bin/setpriv --reuid=65534 --regid=65534 \
  --clear-groups --inh-caps=-all --bounding-set=-all --no-new-privs -- /usr/bin/env -i PATH=/usr/bin /bin/true
# The native sandbox with the same namespaces, mounts, uid drop and env as the bwrap row; its options come
# on fd 4, so each start goes through a /bin/sh that opens them (measured alone in the last row).
printf '%s\0' --die-with-parent --new-session --unshare-pid --unshare-ipc --unshare-uts --unshare-net \
  "${SYS[@]}" --proc /proc --dev /dev --tmpfs /dev/shm --tmpfs /tmp --bind "$work/task" /task \
  --uid 65534 --gid 65534 --setenv PATH /usr/bin --chdir /task >"$work/native.opts"
printf '#!/bin/sh\nexec "%s" --args 4 -- /bin/true 4<"%s"\n' "$work/native" "$work/native.opts" >"$work/native.sh"
chmod +x "$work/native.sh"
row "native sandbox, through a /bin/sh" "$m" "$work/drive" "$m" "$work/native.sh"
row "that /bin/sh alone" "$m" "$work/drive" "$m" /bin/sh -c :
