#!/usr/bin/env bash
# Runs the e2e suite (make e2e) as concurrent shards of one test binary.
#
# Most tests share one environment that TestMain starts; they run one after
# another, then the parallel ones together. TestPullMember (which swaps the
# shared environment for its own while it runs, so it cannot share a
# process, and freezes that environment's processes after its faults) runs
# in a second shard; the Helm install on a host cluster and the demo, each
# in an environment of its own, in a third. The three start at once, so the
# suite takes about as long as the longest instead of the sum.
#
# Each shard's -v output goes to _output/e2e/<shard>.log and is printed when
# the shard ends; the run fails if any shard fails. E2E_SHARDS=1 runs the
# whole suite in one process, as `go test -v .` in e2e/ does.
#
# Usage: e2e.sh [build|run]. Without an argument it builds the binaries the
# suite runs, then runs it. `build` alone is what make test runs before the
# unit tests start: on a cold cache the -race gateway and `go test -race`
# would otherwise compile the same dependencies at the same time, each in
# its own go command, twice the work (the build cache does not share an
# action still running); `run` then takes the binaries built.
set -euo pipefail
mode=${1:-all}
case $mode in all | build | run) ;; *) echo "usage: $0 [build|run]" >&2; exit 2 ;; esac
GO=${GO:-go}
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/_output/e2e"
mkdir -p "$out"
[[ $mode == build ]] || rm -f "$out"/*.log "$out"/*.rc

# Tests that start an environment of their own (e2e/main_test.go's
# ownEnvironmentTests), in shards named before the colon: a shard runs its
# tests in the order given, a test process each, so one environment at a
# time, and TestMain starts no shared environment for them. Three shards at
# once, three environments: four on two cores made everything time out
# (2026-12-04: load 40-53, a 22-minute run). The Helm install and the demo,
# parallel tests, used to wait in the shared process until its sequential
# tests ended, then ran for three minutes on a machine a third busy. The
# hung-dependency cases come last in TestPullMember: their 8 s deadlines
# failed beside the starts of the install shard's environments
# (2026-12-05), which are over by then.
own=(
	'pull:TestPullMember'
	'installs:TestReadmeHelmInstallOnHostCluster TestDemoStopsWithItsParent'
)

cd "$root/e2e"
if [[ $mode != run ]]; then
	rm -f "$out/e2e.test" "$out/gateway" "$out/gateway-static"
	# Linked in the checkout's link cache, which relinks only what changed
	# (hack/link-cache-dir.sh), and copied: a run never executes a file
	# that another run's build may replace.
	link=${LINK_CACHE:-$("$root/hack/link-cache-dir.sh")}/e2e
	mkdir -p "$link"
	# Linked without DWARF, as make unit's tests: nothing here runs a debugger.
	"$GO" test -c -ldflags=-w -o "$link/e2e.test" .
	cp "$link/e2e.test" "$out/e2e.test"
	# One gateway binary for every environment of every process, built before
	# any starts: built inside an environment's start, a cold build with -race
	# (minutes on two cores) ran past its 5-minute deadline (2026-12-04).
	# Without -race it is built as the image's is (no cgo, -trimpath: the
	# Makefile's configuration); the race detector needs cgo.
	race=() gateway=gateway cgo=${CGO_ENABLED:-}
	[[ ${E2E_GATEWAY_RACE:-} == 1 ]] && race=(-race) gateway=gateway-race cgo=1
	(cd "$root" && CGO_ENABLED=$cgo "$GO" build "${race[@]}" -ldflags=-w -o "$link/$gateway" ./cmd/gateway)
	cp "$link/$gateway" "$out/gateway"
	# The Helm test's host cluster runs the gateway image's static binary, a
	# build of its own, which a cold cache also took past that deadline.
	"$GO" run ./cmd/gateway-image -repo "$root" -binary-only "$out/gateway-static"
fi
[[ $mode == build ]] && exit 0
for b in e2e.test gateway gateway-static; do
	[[ -x $out/$b ]] || { echo "e2e: $out/$b is missing: run $0 build first" >&2; exit 1; }
done
export E2E_GATEWAY_BINARY="$out/gateway"
export E2E_HOST_GATEWAY_BINARY="$out/gateway-static"

declare -A pids
# A shard left behind would keep its environment: an interrupted run takes
# them down (their parts follow through Pdeathsig).
stop_shards() {
	local p
	for p in "${pids[@]}"; do
		pkill -P "$p" || true
		kill "$p" || true
	done 2>/dev/null
}
trap stop_shards EXIT
# tests PARALLEL ARGS...: one test process, PARALLEL parallel tests at a time.
tests() {
	# go test runs a package's tests in the package's directory: so does this.
	"$out/e2e.test" -test.v -test.count=1 -test.timeout=50m -test.parallel="$1" "${@:2}"
}

start=$(date +%s)
# The machine's CPU over the run, for the summary: on a VM whose host is
# busy, "steal" says why a run took three times as long as usual.
read -ra cpu_start </proc/stat
# Two parallel tests at a time (E2E_PARALLEL): four saved a minute in one CI
# run, and in the next the demo's environment, starting beside the Helm
# test's, missed its 4-minute start (2026-12-04).
if [[ ${E2E_SHARDS:-} == 1 ]]; then
	tests "${E2E_PARALLEL:-2}" >"$out/all.log" 2>&1 &
	pids[all]=$!
else
	skip=()
	for s in "${own[@]}"; do
		name=${s%%:*}
		read -ra names <<<"${s#*:}"
		(
			rc=0
			for t in "${names[@]}"; do
				tests 1 -test.run "^$t\$" || rc=1
			done
			exit "$rc"
		) >"$out/$name.log" 2>&1 &
		pids[$name]=$!
		skip+=("${names[@]}")
	done
	tests "${E2E_PARALLEL:-2}" -test.skip "^($(IFS='|'; echo "${skip[*]}"))\$" >"$out/shared.log" 2>&1 &
	pids[shared]=$!
fi

failed=() ended_as=()
# Reported in the order they end, so a failure is visible before the
# slower shards finish.
while ((${#pids[@]} > 0)); do
	set +e
	wait -n -p ended "${pids[@]}"
	rc=$?
	set -e
	for name in "${!pids[@]}"; do
		[[ ${pids[$name]} == "$ended" ]] || continue
		unset "pids[$name]"
		ended_as+=("$name: exit $rc after $(($(date +%s) - start))s")
		echo "===== e2e shard ${ended_as[-1]} ($out/$name.log) ====="
		cat "$out/$name.log"
		((rc == 0)) || failed+=("$name")
	done
done
# The end of a long output is often all a CI page shows: it says how each
# shard ended, its slowest tests, every failed test and subtest, and a
# panic or a failure outside any test (TestMain's).
echo "===== e2e summary ====="
elapsed=$(($(date +%s) - start))
read -ra cpu_end </proc/stat
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal, in
# USER_HZ (100 a second).
cpu() { echo $(((cpu_end[$1] - cpu_start[$1]) / 100)); }
echo "$(nproc) cores, ${elapsed}s: busy $(($(cpu 1) + $(cpu 2) + $(cpu 3) + $(cpu 6) + $(cpu 7))) core-s," \
	"idle $(cpu 4), iowait $(cpu 5), steal $(cpu 8)"
# failures LOG: every failed test and subtest, each with what it logged
# (its t.Error and t.Fatal messages among them), a line per place in the
# code that logged: the last message from there and how many came. A
# failure is usually a place of its own, where progress is logged from one
# place many times, so a long test's failure stays in sight; log dumps are
# left out. Then a panic or a failure outside any test. go test -v names
# the test before the lines it prints ("=== RUN", "=== NAME", ...).
failures() {
	awk '
		/^=== (RUN|PAUSE|CONT|NAME) / { test = $3; next }
		/^    [^ ]+\.go:[0-9]+: / && !/\.go:[0-9]+: -----/ {
			site = $1
			if (!((test, site) in count)) places[test, ++nplaces[test]] = site
			count[test, site]++
			said[test, site] = substr($0, 5 + length(site) + 1, 240)
			next
		}
		/^ *--- FAIL: / { order[++failed] = $0; next }
		/^panic: |^FAIL: / { other[++others] = $0 }
		END {
			for (i = 1; i <= failed; i++) {
				print "  " order[i]
				name = order[i]
				sub(/^ *--- FAIL: /, "", name)
				sub(/ .*/, "", name)
				for (n = 1; n <= nplaces[name] && n <= 15; n++) {
					site = places[name, n]
					times = count[name, site] > 1 ? " (" count[name, site] " times, the last)" : ""
					print "        " substr(site, 1, length(site) - 1) times ": " said[name, site]
				}
			}
			for (i = 1; i <= others; i++) print "  " other[i]
		}' "$1"
}
for line in "${ended_as[@]}"; do
	name=${line%%:*}
	echo "shard $line"
	sed -nE 's/^--- (PASS|FAIL): ([^ ]+) \(([0-9.]+)s\)$/\3 \2 \1/p' "$out/$name.log" |
		sort -rn | awk 'NR <= 5 {printf "  %-45s %8ss %s\n", $2, $1, $3}'
	failures "$out/$name.log"
done
if ((${#failed[@]} > 0)); then
	echo "e2e: shards failed: ${failed[*]}"
	exit 1
fi
echo "e2e: every shard passed in ${elapsed}s"
