#!/usr/bin/env bash
# Runs the e2e compatibility subset against each Karmada of COMPAT_VERSIONS
# ("pinned" is the commit the Makefile pins, the others are release tags)
# and prints a table of test by version (`make compat`). Each version is
# built first (make karmada KARMADA_VERSION=..., into bin/karmada-<version>
# and _output/karmada-src-<version>, cached), then the subset runs on an
# environment of that Karmada (E2E_KARMADA_VERSION). Per version the log and
# go test's JSON are kept in _output/compat/, the table in
# _output/compat/compat.md; the exit status is 0 only if every version
# passed every test of the subset.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
MAKE=${MAKE:-make}
COMPAT_VERSIONS=${COMPAT_VERSIONS:-pinned v1.18.2 v1.16.8}
# The subset: one anchored -run regexp per word, so a test joins with one
# more word. Smoke, the streams (exec, attach, logs, port-forward), the CI
# executors, pod status fidelity and the member-local pod refusal.
COMPAT_TESTS=${COMPAT_TESTS:-TestSmoke TestStreams TestAttach TestLogs TestPortForward TestExecutor.* TestNodeClient TestSlowReaderGetsEveryByte TestIdleStreamsKeepTheirUpstream TestPodStatusFidelity TestMemberLocalPodNotReached TestDirectMemberAccess TestPullMember}
COMPAT_TIMEOUT=${COMPAT_TIMEOUT:-30m}

read -r -a words <<<"$COMPAT_TESTS"
run="^($(IFS='|'; echo "${words[*]}"))\$"
out=$PWD/_output/compat
mkdir -p "$out"
echo "compat: -run '$run' against: $COMPAT_VERSIONS (logs in $out)"

tables=()
for v in $COMPAT_VERSIONS; do
  if [ "$v" = pinned ]; then kv="" bindir=bin/karmada; else kv=$v bindir=bin/karmada-$v; fi
  log=$out/$v.log json=$out/$v.json
  rm -f "$json"
  start=$(date +%s)
  if "$MAKE" --no-print-directory karmada KARMADA_VERSION="$kv" >"$log" 2>&1; then
    # The test's own verdict goes into the table, not into set -e.
    (cd e2e && E2E_KARMADA_VERSION="$kv" "$GO" test -json -count=1 -timeout "$COMPAT_TIMEOUT" -run "$run" .) >"$json" 2>>"$log" || true
  else
    echo "compat: Karmada $v did not build, see $log" >&2
  fi
  label=$v
  [ "$v" != pinned ] || label="$(cat "$bindir/COMMIT" 2>/dev/null || echo unknown) (pinned)"
  echo "compat: $label done in $(($(date +%s) - start))s"
  tables+=("$label=$json")
done
cd e2e && "$GO" run ./cmd/compat-table -md "$out/compat.md" "${tables[@]}"
