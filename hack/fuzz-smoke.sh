#!/usr/bin/env bash
# Runs every fuzz target of the repository (the root module, sdk/ and plugin-examples/*) for
# FUZZTIME each, one `go test -fuzz` per target as go requires, and fails if any fails. The
# targets are found, not listed: a new `func Fuzz` in a tracked test file joins by itself.
#
#   hack/fuzz-smoke.sh        run them (mk/fuzz.mk: make fuzz-smoke)
#   hack/fuzz-smoke.sh -l     list them: module directory, package, target
#
# Environment: GO (go); FUZZTIME (3s; anything -fuzztime takes, e.g. 1m or 10000x);
# TESTSUMMARY and FUZZ_SAVE, for make test: run each target through hack/testsummary and
# append the events of its final attempt to FUZZ_SAVE.
#
# Go before 1.27 may fail a target with a bare "context deadline exceeded" when -fuzztime
# runs out while a worker is busy (a race in its fuzzing coordinator, go.dev/issue/75804;
# likelier on a loaded machine). Such a failure writes no input, so a run that fails that way
# without a new file in testdata/fuzz/<target>/ is tried again, up to three times in all.
#
# A failing input is written under the package's testdata/fuzz/<target>/, where `go test`
# then replays it; commit it with the fix.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
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

# inputs DIR: how many files DIR holds (0 when it does not exist).
inputs() {
	if [ -d "$1" ]; then find "$1" -type f | wc -l; else echo 0; fi
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()
start=$SECONDS
for t in "${targets[@]}"; do
	read -r mod pkg name <<<"$t"
	where=$pkg
	[ "$mod" = . ] || where=$mod/${pkg#./}
	corpus=$mod/${pkg#./}/testdata/fuzz/$name
	for attempt in 1 2 3; do
		echo "== $name ($where, $FUZZTIME)"
		before=$(inputs "$corpus")
		rm -f "$work/events" "$work/out"
		set +e
		if [ -n "${FUZZ_SAVE:-}" ]; then
			(cd "$mod" && "$TESTSUMMARY" -save "$work/events" -- $GO test -json -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME" "$pkg") 2>&1 | tee "$work/out"
		else
			(cd "$mod" && $GO test -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME" "$pkg") 2>&1 | tee "$work/out"
		fi
		status=${PIPESTATUS[0]}
		set -e
		if [ "$status" -ne 0 ] && [ "$attempt" -lt 3 ] && [ "$(inputs "$corpus")" = "$before" ] &&
			grep -q '^ *context deadline exceeded$' "$work/out"; then
			echo "fuzz-smoke: $name: \"context deadline exceeded\" without a failing input (go.dev/issue/75804); again"
			continue
		fi
		break
	done
	if [ -n "${FUZZ_SAVE:-}" ]; then
		mkdir -p "$(dirname "$FUZZ_SAVE")"
		cat "$work/events" >>"$FUZZ_SAVE" 2>/dev/null || true
	fi
	if [ "$status" -ne 0 ]; then
		failed+=("$name ($where)")
	fi
done
echo "fuzz-smoke: ${#targets[@]} targets in $((SECONDS - start))s"
if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz-smoke: failed:" >&2
	printf '  %s\n' "${failed[@]}" >&2
	exit 1
fi
