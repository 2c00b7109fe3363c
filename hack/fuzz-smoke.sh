#!/usr/bin/env bash
# Runs every fuzz target of the repository (the root module, sdk/ and plugin-examples/*) for
# FUZZTIME each, one `go test -fuzz` per target as go requires, and fails if any fails. The
# targets are found, not listed: a new `func Fuzz` in a tracked test file joins by itself.
#
#   hack/fuzz-smoke.sh        run them (mk/fuzz.mk: make fuzz-smoke)
#   hack/fuzz-smoke.sh -l     list them: module directory, package, target
#
# Environment: FUZZTIME (3s; anything -fuzztime takes, e.g. 1m or 10000x); GOTEST, the
# command that runs one target (`go test`; make test's goes through hack/testsummary).
# A failing input is written under the package's testdata/fuzz/<target>/, where `go test`
# then replays it; commit it with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
GOTEST=${GOTEST:-go test}
FUZZTIME=${FUZZTIME:-3s}

# moddir DIR: the nearest directory at or above DIR holding a go.mod.
moddir() {
	local d=$1
	until [ -f "$d/go.mod" ]; do d=$(dirname "$d"); done
	echo "$d"
}

# One line per target: module directory, package (relative to it), target name.
targets=()
while IFS=: read -r file name; do
	dir=$(dirname "$file")
	mod=$(moddir "$dir")
	rel=${dir#"$mod"}; rel=./${rel#/}
	targets+=("$mod $rel $name")
done < <(git ls-files -- '*_test.go' | xargs grep -o '^func Fuzz[A-Za-z0-9_]*' /dev/null | sed 's/:func /:/' | sort)

if [ ${#targets[@]} -eq 0 ]; then
	echo "fuzz-smoke: no fuzz targets found" >&2
	exit 1
fi
if [ "${1:-}" = -l ]; then
	printf '%s\n' "${targets[@]}"
	exit 0
fi

failed=()
start=$SECONDS
for t in "${targets[@]}"; do
	read -r mod pkg name <<<"$t"
	where=$pkg
	[ "$mod" = . ] || where=$mod/${pkg#./}
	echo "== $name ($where, $FUZZTIME)"
	if ! (cd "$mod" && $GOTEST -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME" "$pkg"); then
		failed+=("$name ($where)")
	fi
done
echo "fuzz-smoke: ${#targets[@]} targets in $((SECONDS - start))s"
if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz-smoke: failed:" >&2
	printf '  %s\n' "${failed[@]}" >&2
	exit 1
fi
