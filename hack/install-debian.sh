#!/usr/bin/env bash
# Installs Debian packages the build or tests need, as root on a fresh machine.
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
  echo "missing: $*; run 'sudo apt-get install -y $*' (or run make as root)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "$@" >/dev/null
