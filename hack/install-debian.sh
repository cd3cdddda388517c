#!/usr/bin/env bash
# Installs those of the named Debian packages the build or tests need that
# are not installed yet, as root on a fresh machine.
# Packaged services are not started: the e2e environment runs its own etcd
# and containerds on ephemeral ports and work directories.
#
# Several make targets call this (the nodes' runtime, shellcheck, Prometheus,
# asciinema), and `make -j` runs them at once. apt-get refuses to run while
# another holds its locks, so the calls take turns on a lock of their own and
# each installs only what is still missing once it has the lock.
set -euo pipefail
missing() {
  local p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
  done
}
mapfile -t todo < <(missing "$@")
if [ ${#todo[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "missing: ${todo[*]}; run 'sudo apt-get install -y ${todo[*]}' (or run make as root)" >&2
  exit 1
fi
exec 9>/run/karmada-exec-gateway-apt.lock
flock 9
# Another call may have installed some while this one waited.
mapfile -t todo < <(missing "${todo[@]}")
if [ ${#todo[@]} -eq 0 ]; then exit 0; fi
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d keeps the packages' init scripts from starting their services.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
chmod +x /usr/sbin/policy-rc.d
trap 'rm -f /usr/sbin/policy-rc.d' EXIT
# One index refresh serves every call of a run (stamped in /run, which a
# reboot clears).
stamp=/run/karmada-exec-gateway-apt.updated
if [ -z "$(find "$stamp" -mmin -60 2>/dev/null)" ]; then
  apt-get update -qq
  touch "$stamp"
fi
apt-get install -y -qq --no-install-recommends "${todo[@]}" >/dev/null
