#!/usr/bin/env bash
# Installs what the e2e environment's nodes run on from Debian: containerd
# (with ctr and the runc shim), runc, the CNI plugins, busybox-static for
# the pods' image, gcc to compile Kubernetes' pause.c, and iproute2 for the
# pod bridges. The packaged containerd service must not keep running: every
# member starts its own containerd under the environment's work directory.
set -euo pipefail
pkgs=(containerd runc containernetworking-plugins busybox-static gcc libc6-dev iproute2)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "missing: ${missing[*]}; run 'sudo apt-get install -y ${missing[*]}' (or run make as root)" >&2
  exit 1
fi
# policy-rc.d keeps the package's init script from starting a system containerd.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
chmod +x /usr/sbin/policy-rc.d
trap 'rm -f /usr/sbin/policy-rc.d' EXIT
"$(dirname "$0")/install-debian.sh" "${missing[@]}"
containerd --version
