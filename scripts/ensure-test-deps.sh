#!/usr/bin/env bash
# Makes sure the system packages the tests use are present: Debian's python3-torch (the qualification
# workload runs real torch.distributed with gloo under /usr/bin/python3), chromium (the dashboard's
# browser test), bubblewrap (every process task runs in a bwrap sandbox), podman with runc (container
# tasks; crun fails on cgroup v1/v2 hybrid hosts), uidmap (rootless podman) and busybox-static (the
# rootfs of the image the container tests build locally), gcc and libc6-dev (npm run build compiles the
# native sandbox statically, ADR 0038), e2fsprogs (mkfs.ext4: each task dir is a file system of its own,
# ADR 0043), and Slurm (slurmctld, slurmd, slurm-client,
# munge: the Slurm backend's tests start a real local cluster with fake GPUs, see test/support/slurm.ts;
# installed without recommends, as scripts/slurm/start-local-slurm.sh does). Installs them with apt when
# running as root; otherwise says what to install.
set -euo pipefail
missing=()
/usr/bin/python3 -c 'import torch' >/dev/null 2>&1 || missing+=(python3-torch)
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v runc >/dev/null 2>&1 || missing+=(runc)
command -v newuidmap >/dev/null 2>&1 || missing+=(uidmap)
[ -x /bin/busybox ] || missing+=(busybox-static)
command -v cc >/dev/null 2>&1 || missing+=(gcc)
[ -x /usr/sbin/mkfs.ext4 ] || [ -x /sbin/mkfs.ext4 ] || missing+=(e2fsprogs)
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || [ -e /usr/lib/aarch64-linux-gnu/libc.a ] || [ -e /usr/lib/libc.a ] ||
  missing+=(libc6-dev)
slurm=()
command -v slurmctld >/dev/null 2>&1 || slurm+=(slurmctld)
command -v slurmd >/dev/null 2>&1 || slurm+=(slurmd)
command -v sbatch >/dev/null 2>&1 || slurm+=(slurm-client)
command -v munged >/dev/null 2>&1 || slurm+=(munge)
[ ${#missing[@]} -eq 0 ] && [ ${#slurm[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "tests need: ${missing[*]} ${slurm[*]} — run: sudo apt-get install -y ${missing[*]} ${slurm[*]}" >&2
  exit 1
fi
echo "installing ${missing[*]} ${slurm[*]} (apt)…" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
[ ${#missing[@]} -eq 0 ] || apt-get install -y -qq "${missing[@]}" >/dev/null
# policy-rc.d or a missing init system makes the postinst "invoke-rc.d … start" a no-op; the tests
# start the daemons themselves.
[ ${#slurm[@]} -eq 0 ] || apt-get install -y -qq --no-install-recommends "${slurm[@]}" >/dev/null
