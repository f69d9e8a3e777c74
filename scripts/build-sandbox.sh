#!/usr/bin/env bash
# Builds the native per-task sandbox (worker/sandbox/native/gpu-broker-sandbox.c, ADR 0038) into
# dist/native/gpu-broker-sandbox: static when the C library's static archive is there (no dynamic loader
# work per task), else dynamic. Without a C compiler it says so and succeeds: a root worker then sandboxes
# with bwrap + setpriv + env, as before. `npm run build` runs it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src="$root/worker/sandbox/native/gpu-broker-sandbox.c"
out="$root/dist/native/gpu-broker-sandbox"
cc=${CC:-cc}
if ! command -v "$cc" >/dev/null 2>&1; then
  echo "build-sandbox: no C compiler ($cc): the native sandbox is not built; root workers use bwrap (apt-get install gcc to build it)" >&2
  rm -f "$out"
  exit 0
fi
mkdir -p "$(dirname "$out")"
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
flags=(-O2 -Wall -Wextra -Werror -D_FORTIFY_SOURCE=2 -fstack-protector-strong)
if ! "$cc" "${flags[@]}" -static -o "$tmp" "$src" 2>/dev/null; then
  "$cc" "${flags[@]}" -o "$tmp" "$src"
fi
chmod 0755 "$tmp"
mv -f "$tmp" "$out"
