#!/usr/bin/env bash
# Prints the directory that keeps this checkout's linked test binaries, the
# e2e suite's binaries and the demo's gateway between runs.
#
# `go test -o DIR/` and `go build -o FILE` skip the link when the file there
# already carries the build ID of what they would link; Go checks it, so a
# stale binary is never run. Go's build cache keeps compiled packages but
# not linked binaries: with every output in a fresh clone's _output, a warm
# CI run linked 70 binaries again, a twelfth of its CPU (2026-12-04).
#
# Keyed by the checkout's path: two checkouts never overwrite each other's
# binaries, and a fresh clone at the same path, as CI's, links only what
# changed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd -P)
echo "${XDG_CACHE_HOME:-$HOME/.cache}/karmada-exec-gateway/link/$(printf %s "$root" | sha256sum | cut -c1-16)"
