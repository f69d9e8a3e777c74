#!/usr/bin/env bash
# Builds the worker's native programs into dist/native/: the per-task sandbox
# (worker/sandbox/native/gpu-broker-sandbox.c, ADR 0038) and the spawner
# (worker/local/native/gpu-broker-spawner.c, ADR 0040); static when the C library's static archive is
# there (no dynamic loader work per start), else dynamic. Without a C compiler it says so and succeeds: a
# root worker then sandboxes with bwrap + setpriv + env, and every worker starts its tasks through the Node
# spawner, as before. `npm run build` runs it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cc=${CC:-cc}
programs=(
  "worker/sandbox/native/gpu-broker-sandbox.c:gpu-broker-sandbox"
  "worker/local/native/gpu-broker-spawner.c:gpu-broker-spawner"
)
if ! command -v "$cc" >/dev/null 2>&1; then
  echo "build-native: no C compiler ($cc): the native sandbox and spawner are not built; root workers use bwrap, every worker the Node spawner (apt-get install gcc to build them)" >&2
  for p in "${programs[@]}"; do rm -f "$root/dist/native/${p#*:}"; done
  exit 0
fi
mkdir -p "$root/dist/native"
flags=(-O2 -Wall -Wextra -Werror -D_FORTIFY_SOURCE=2 -fstack-protector-strong)
for p in "${programs[@]}"; do
  src="$root/${p%%:*}"
  out="$root/dist/native/${p#*:}"
  tmp="$out.tmp.$$"
  trap 'rm -f "$tmp"' EXIT
  if ! "$cc" "${flags[@]}" -static -o "$tmp" "$src" 2>/dev/null; then
    "$cc" "${flags[@]}" -o "$tmp" "$src"
  fi
  chmod 0755 "$tmp"
  mv -f "$tmp" "$out"
done
