#!/usr/bin/env bash
# Installs Debian packages the build or tests need, as root on a fresh machine.
# Packaged services are not started: the e2e environment runs its own etcd
# and containerds on ephemeral ports and work directories.
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
  echo "missing: $*; run 'sudo apt-get install -y $*' (or run make as root)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d keeps the packages' init scripts from starting their services.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
chmod +x /usr/sbin/policy-rc.d
trap 'rm -f /usr/sbin/policy-rc.d' EXIT
apt-get update -qq
apt-get install -y -qq --no-install-recommends "$@" >/dev/null
