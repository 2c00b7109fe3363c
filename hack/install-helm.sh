#!/usr/bin/env bash
# Installs a pinned Helm from the Go module proxy into a cache directory keyed by version, for
# the chart checks (mk/chart.mk). Idempotent: prints the binary's path and exits at once when it
# is already there and runs.
#
#   hack/install-helm.sh          -> prints $ALLOT_CACHE/helm-v3.22.0/helm
#
# Building from source (a few minutes cold) rather than downloading a release tarball keeps
# one trust path for every tool of the repository: the Go checksum database.
set -euo pipefail
HELM_VERSION=${HELM_VERSION:-v3.22.0}
CACHE=${ALLOT_CACHE:-$HOME/.cache/allot}
OUT="$CACHE/helm-$HELM_VERSION"
BIN="$OUT/helm"

# A binary that does not run (a build cut off half way) is rebuilt rather than trusted.
if [ -x "$BIN" ] && "$BIN" version --short >/dev/null 2>&1; then echo "$BIN"; exit 0; fi
rm -f "$BIN"
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# helm's `version` reads its version from these variables; without them it prints v3.x-dev.
ldflags="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
# go install needs a module-aware directory that is not this repository's module (its go.mod
# would pull helm's dependencies into ours).
cd "$work"
CGO_ENABLED=0 GOBIN="$work" nice -n 10 go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
mv "$work/helm" "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
"$BIN" version --short >&2
echo "$BIN"
