#!/usr/bin/env bash
# Installs etcd from Debian's etcd-server package for the e2e environment and
# makes sure the packaged service does not keep running: the environment
# starts its own etcd on an ephemeral loopback port.
set -euo pipefail
if command -v etcd >/dev/null; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "etcd is missing: run 'sudo apt-get install -y etcd-server' (or run make as root)" >&2
  exit 1
fi
# policy-rc.d keeps the package's init script from starting a system etcd.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
chmod +x /usr/sbin/policy-rc.d
trap 'rm -f /usr/sbin/policy-rc.d' EXIT
"$(dirname "$0")/install-debian.sh" etcd-server
# sed reads all of etcd's output: `head -1` exiting first would kill etcd
# with SIGPIPE and fail this script under pipefail.
etcd --version | sed -n 1p
