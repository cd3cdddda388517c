#!/usr/bin/env bash
# Installs what the e2e environment's nodes run on from Debian: containerd
# (with ctr and the runc shim), runc, the CNI plugins, busybox-static for
# the pods' image, gcc to compile Kubernetes' pause.c, iproute2 for the pod
# bridges and network namespaces, and tinyproxy and dante-server, the HTTP
# CONNECT and SOCKS5 proxies a Pull-mode member is reached through.
# install-debian.sh keeps the packaged services (containerd's, the
# proxies') from running: every member starts its
# own containerd, and every Pull member its own proxy, under the
# environment's work directory.
set -euo pipefail
"$(dirname "$0")/install-debian.sh" containerd runc containernetworking-plugins busybox-static gcc libc6-dev iproute2 tinyproxy dante-server
