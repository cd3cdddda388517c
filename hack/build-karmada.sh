#!/usr/bin/env bash
# Builds the Karmada binaries the e2e environment runs
# (karmada-aggregated-apiserver, -controller-manager, -scheduler, -webhook,
# and karmada-agent for Pull-mode members) from Karmada's source at one pinned commit, into BIN_DIR/karmada/.
#
# The source comes from, in order: KARMADA_SRC_ARCHIVE (a tar.gz of the tree
# at that commit, e.g. an offline cache), else a git clone of KARMADA_REPO.
# The tree is kept in SRC_DIR (gitignored) because the e2e environment reads
# Karmada's CRDs and deploy manifests from it. Nothing is rebuilt when
# BIN_DIR/karmada/COMMIT already names the pinned commit.
set -euo pipefail

: "${KARMADA_COMMIT:?pinned commit}"
: "${BIN_DIR:?where binaries go}"
: "${SRC_DIR:?where the source tree goes}"
KARMADA_REPO=${KARMADA_REPO:-https://github.com/karmada-io/karmada.git}
GO=${GO:-go}
# KARMADA_OUT puts a release elsewhere (make karmada KARMADA_VERSION=v1.18.2:
# KARMADA_COMMIT is then the tag, cloned at it, and the binaries go to
# bin/karmada-v1.18.2/), so several Karmadas sit side by side.
out="${KARMADA_OUT:-$BIN_DIR/karmada}"
stamp="$out/COMMIT"

binaries=(aggregated-apiserver controller-manager scheduler webhook agent)

# all_in DIR: every binary is in DIR (a build or cache from before the
# agent was added lacks it and must not count as done).
all_in() {
  local b
  for b in "${binaries[@]}"; do [ -f "$1/$b" ] || return 1; done
}

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$KARMADA_COMMIT" ] && [ -f "$SRC_DIR/COMMIT" ] && all_in "$out"; then
  exit 0
fi

fetch_source() {
  rm -rf "$SRC_DIR"
  mkdir -p "$SRC_DIR"
  if [ -n "${KARMADA_SRC_ARCHIVE:-}" ] && [ -f "$KARMADA_SRC_ARCHIVE" ]; then
    echo "karmada: source from $KARMADA_SRC_ARCHIVE"
    tar -xzf "$KARMADA_SRC_ARCHIVE" -C "$SRC_DIR"
  elif command -v git >/dev/null && git clone --quiet --filter=blob:none --no-checkout "$KARMADA_REPO" "$SRC_DIR" 2>/dev/null &&
    git -C "$SRC_DIR" checkout --quiet "$KARMADA_COMMIT" 2>/dev/null; then
    echo "karmada: source cloned from $KARMADA_REPO at $KARMADA_COMMIT"
  else
    rm -rf "$SRC_DIR"
    cat >&2 <<EOF
karmada: no source for commit $KARMADA_COMMIT.
  Neither the archive KARMADA_SRC_ARCHIVE=${KARMADA_SRC_ARCHIVE:-<unset>} exists
  nor could $KARMADA_REPO be cloned (no network?).
  Give one: make KARMADA_SRC_ARCHIVE=/path/to/karmada-<commit>.tar.gz ...
EOF
    exit 1
  fi
  echo "$KARMADA_COMMIT" > "$SRC_DIR/COMMIT"
}

# restore_embeds copies files that //go:embed patterns name but a trimmed
# vendor/ lacks (an archive trimmed to .go files) from the module cache, at
# the exact version vendor/modules.txt records. A full clone needs none.
restore_embeds() {
  local log=$1 restored=0 line file pattern pkgdir mod ver moddir rel dst
  while IFS= read -r line; do
    file=${line%%:*}
    pattern=$(sed -n 's/.*pattern \(.*\): no matching files found/\1/p' <<<"$line")
    pkgdir=${file#vendor/}
    pkgdir=${pkgdir%/*}
    # The longest module path in modules.txt that contains the package.
    read -r mod ver < <(awk -v p="$pkgdir" '$1 == "#" && (p == $2 || index(p, $2 "/") == 1) { print length($2), $2, $3 }' \
      "$SRC_DIR/vendor/modules.txt" | sort -rn | head -1 | cut -d' ' -f2-)
    [ -n "$mod" ] || { echo "karmada: no module for $pkgdir" >&2; return 1; }
    moddir=$(cd "$SRC_DIR" && GOFLAGS=-mod=mod "$GO" mod download -json "$mod@$ver" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
    rel=${pkgdir#"$mod"}
    echo "karmada: restoring $mod@$ver${rel}/$pattern into vendor/"
    dst="$SRC_DIR/vendor/$pkgdir/$pattern"
    rm -rf "$dst" && mkdir -p "$(dirname "$dst")"
    cp -r "$moddir$rel/$pattern" "$dst"
    chmod -R u+w "$dst"
    restored=1
  done < <(grep 'no matching files found' "$log" || true)
  [ "$restored" = 1 ]
}

if [ ! -f "$SRC_DIR/COMMIT" ] || [ "$(cat "$SRC_DIR/COMMIT")" != "$KARMADA_COMMIT" ]; then
  fetch_source
fi

# The linked binaries are kept per commit, Go version and cgo setting in the
# user's cache, next to Go's own: a fresh clone on a machine that built them
# once copies them instead of relinking four large binaries (about a minute
# on 2 cores). make builds them without cgo, as Karmada's releases are.
cache="${XDG_CACHE_HOME:-$HOME/.cache}/karmada-exec-gateway/karmada-$KARMADA_COMMIT-$("$GO" env GOVERSION)-cgo$("$GO" env CGO_ENABLED)"
mkdir -p "$out"
if [ -f "$cache/COMMIT" ] && all_in "$cache"; then
  for b in "${binaries[@]}"; do cp -f "$cache/$b" "$out/$b"; done
  echo "$KARMADA_COMMIT" > "$stamp"
  echo "karmada: ${binaries[*]} from $cache"
  exit 0
fi

start=$(date +%s)
# -trimpath keeps source paths out of the build cache's keys, so a clone
# in another directory (CI's) reuses the packages compiled here.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for attempt in 1 2 3; do
  if (cd "$SRC_DIR" && "$GO" build -mod=vendor -trimpath -ldflags='-s -w' -o "$out/" \
    "${binaries[@]/#/./cmd/}") 2>"$log"; then
    echo "$KARMADA_COMMIT" > "$stamp"
    mkdir -p "$cache.tmp" && cp -f "${binaries[@]/#/$out/}" "$cache.tmp/" && echo "$KARMADA_COMMIT" > "$cache.tmp/COMMIT" &&
      rm -rf "$cache" && mv "$cache.tmp" "$cache" || echo "karmada: could not keep the binaries in $cache" >&2
    echo "karmada: built ${binaries[*]} in $(($(date +%s) - start))s"
    exit 0
  fi
  if [ "$attempt" = 3 ] || ! restore_embeds "$log"; then
    cat "$log" >&2
    exit 1
  fi
done
