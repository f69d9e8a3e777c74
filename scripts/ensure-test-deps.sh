#!/usr/bin/env bash
# Makes sure the system packages the tests use are present: Debian's python3-torch (the qualification
# workload runs real torch.distributed with gloo under /usr/bin/python3) and chromium (the dashboard's
# browser test). Installs them with apt when running as root; otherwise says what to install.
set -euo pipefail
missing=()
/usr/bin/python3 -c 'import torch' >/dev/null 2>&1 || missing+=(python3-torch)
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "tests need: ${missing[*]} — run: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]} (apt)…" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
