#!/usr/bin/env bash
# Runs `make generate` and fails if it changed any file: every generated file (protobuf,
# deepcopy and CRDs, the chart's CRD copies, the eBPF objects) must be what its source and
# the pinned generators produce. Changes already in the working tree before the run are not
# blamed on the generators (on CI the tree is clean, so this is `git status --porcelain`
# being empty afterwards).
set -euo pipefail
cd "$(dirname "$0")/.."
snapshot() {
	git status --porcelain=v1 --untracked-files=all
	git diff HEAD --binary | sha256sum
	git ls-files --others --exclude-standard -z | xargs -0 -r sha256sum
}
before=$(snapshot)
make --no-print-directory generate >/dev/null
after=$(snapshot)
if [ "$before" != "$after" ]; then
	echo "verify-generated: make generate changed files; run it and commit the result:" >&2
	git status --short >&2
	exit 1
fi
echo "verify-generated: generated files are up to date"
