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

# helm's version, and the Kubernetes version `helm template` and `helm lint` assume without a
# cluster (.Capabilities.KubeVersion), are link-time variables; helm's Makefile derives the
# latter from its client-go (v0.X.Y -> 1.X). Without them charts see Kubernetes v1.20.
gomod=$(cd / && go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
kminor=$(sed -n 's/^[[:space:]]*k8s.io\/client-go v0\.\([0-9]*\)\..*/\1/p' "$gomod")
[ -n "$kminor" ] || { echo "install-helm: cannot read helm's client-go version from $gomod" >&2; exit 1; }
ldflags="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in pkg/chartutil pkg/lint/rules; do
  ldflags="$ldflags -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$kminor"
done

# A binary that does not run (a build cut off half way) or was built with other link flags is
# rebuilt rather than trusted.
if [ -x "$BIN" ] && [ "$(cat "$OUT/ldflags" 2>/dev/null)" = "$ldflags" ] && "$BIN" version --short >/dev/null 2>&1; then
  echo "$BIN"; exit 0
fi
rm -f "$BIN" "$OUT/ldflags"
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# go install needs a module-aware directory that is not this repository's module (its go.mod
# would pull helm's dependencies into ours).
cd "$work"
CGO_ENABLED=0 GOBIN="$work" nice -n 10 go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
mv "$work/helm" "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
echo "$ldflags" > "$OUT/ldflags"
"$BIN" version --short >&2
echo "$BIN"
