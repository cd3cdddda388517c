#!/usr/bin/env bash
# Fails when a module whose packages two of our builds compile is at
# different versions in them: the product (make vet, the unit tests), the
# e2e module (its test binary) and the tools module (the Kubernetes
# binaries, etcd, helm). At one version, a cold run compiles each such
# package once and every build reuses it; at two, it compiles the package,
# and everything that imports it, once per version (docs/ci.md). make vet
# runs this.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
# Each line: module version build (a replaced module at its replacement's
# version; the repository's own modules have none and are left out).
format='{{with .Module}}{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}{{end}}'
list() {
	local dir=$1 build=$2
	shift 2
	(cd "$dir" && "$GO" list -deps -f "$format" "$@") | awk -v b="$build" 'NF == 2 {print $1, $2, b}' | sort -u
}
mismatched=$(
	{
		list . product -test ./...
		list e2e e2e -test ./...
		list hack/tools tools tool
	} | awk '
		{ builds[$1 " " $2] = builds[$1 " " $2] " " $3; if (!seen[$1 " " $2]++) n[$1]++ }
		END { for (k in builds) { split(k, f, " "); if (n[f[1]] > 1) print k ":" builds[k] } }' | sort
)
if [[ -n $mismatched ]]; then
	echo "verify-shared-versions: these modules are at different versions in the builds named after each:" >&2
	printf "%s\n" "$mismatched" | sed "s/^/  /" >&2
	echo "Require one version in each go.mod (hack/tools/go.mod, go.mod, e2e/go.mod)." >&2
	exit 1
fi
echo "verify-shared-versions: every module the product, e2e and tools builds share is at one version"
