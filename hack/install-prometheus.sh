#!/usr/bin/env bash
# Installs Debian's prometheus package (prometheus and promtool) for the
# monitoring tests and makes sure the packaged service does not keep running:
# the tests start their own Prometheus with their own configuration and data
# directory on an ephemeral loopback port.
set -euo pipefail
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then exit 0; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "prometheus is missing: run 'sudo apt-get install -y prometheus' (or run make as root)" >&2
  exit 1
fi
# install-debian.sh keeps the package's init script from starting a system
# Prometheus (and its node exporter) at install time.
"$(dirname "$0")/install-debian.sh" prometheus
promtool --version 2>&1 | sed -n 1p
