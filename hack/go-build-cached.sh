#!/usr/bin/env bash
# Usage: go-build-cached.sh MODULE_DIR PACKAGE OUTPUT
# Builds PACKAGE of the Go module in MODULE_DIR into OUTPUT with LDFLAGS,
# CGO_ENABLED and GOFLAGS from the environment, keeping the linked binary in
# the user's cache under a key of everything that decides its bytes (Go
# version and platform, CGO_ENABLED, GOFLAGS, LDFLAGS, the package, the
# module's go.mod and go.sum). Go's build cache keeps compiled packages but
# `go build -o` relinks every time: on a fresh clone with warm caches the
# Kubernetes binaries and helm cost a minute or two of links, a copy costs
# seconds.
set -euo pipefail
module_dir=$1 pkg=$2 out=$3
GO=${GO:-go}
key=$(
  {
    "$GO" env GOVERSION GOOS GOARCH CGO_ENABLED GOFLAGS
    echo "LDFLAGS=${LDFLAGS:-}" "$pkg"
    cat "$module_dir/go.mod" "$module_dir/go.sum"
  } | sha256sum | cut -c1-32
)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/karmada-exec-gateway/bin/$key"
name=$(basename "$out")
mkdir -p "$(dirname "$out")"
if [ -f "$cache/$name" ]; then
  cp -f "$cache/$name" "$out"
  echo "$name: from $cache"
  exit 0
fi
(cd "$module_dir" && "$GO" build -ldflags="${LDFLAGS:-}" -o "$out" "$pkg")
# Stored atomically, so a build cut short never leaves a half binary to copy.
if mkdir -p "$cache" && cp -f "$out" "$cache/.$name.tmp" && mv -f "$cache/.$name.tmp" "$cache/$name"; then
  echo "$name: built, kept in $cache"
else
  echo "$name: built; could not keep it in $cache" >&2
fi
