#!/usr/bin/env bash
# Installs etcd from Debian's etcd-server package for the e2e environment
# (install-debian.sh keeps the packaged service from running: the
# environment starts its own etcd on an ephemeral loopback port).
set -euo pipefail
if command -v etcd >/dev/null; then exit 0; fi
"$(dirname "$0")/install-debian.sh" etcd-server
# sed reads all of etcd's output: `head -1` exiting first would kill etcd
# with SIGPIPE and fail this script under pipefail.
etcd --version | sed -n 1p
