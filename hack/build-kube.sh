#!/usr/bin/env bash
# Builds a real kube-apiserver and etcd from the Go module proxy into a cache directory keyed
# by version, for the Kubernetes-mode tests. Idempotent: prints the directory and exits at once
# when the binaries are already there.
#
#   hack/build-kube.sh            -> prints $ALLOT_CACHE/kube-v1.36.3-etcd-v3.6.6
#
# The test harness (test/k8senv) looks for the binaries there, or in $KUBEBUILDER_ASSETS.
set -euo pipefail
KUBE_VERSION=${KUBE_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.6}
CACHE=${ALLOT_CACHE:-$HOME/.cache/allot}
OUT="$CACHE/kube-$KUBE_VERSION-etcd-$ETCD_VERSION"
# A binary that does not run (e.g. an etcd built by an older version of this script, which
# panicked at start) is rebuilt rather than trusted.
[ -x "$OUT/etcd" ] && ! "$OUT/etcd" --version >/dev/null 2>&1 && rm -f "$OUT/etcd"
[ -x "$OUT/kube-apiserver" ] && ! "$OUT/kube-apiserver" --version >/dev/null 2>&1 && rm -f "$OUT/kube-apiserver"
if [ -x "$OUT/kube-apiserver" ] && [ -x "$OUT/etcd" ]; then echo "$OUT"; exit 0; fi
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
staging_version="v0${KUBE_VERSION#v1}"   # v1.36.3 -> v0.36.3

if [ ! -x "$OUT/etcd" ]; then
  mkdir -p "$work/etcd" && cd "$work/etcd"
  cat > go.mod <<GOMOD
module allot.local/build-etcd

go 1.26.0
GOMOD
  cat > main.go <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

// etcdmain.Main reads its flags from the slice it is given (nil panics).
func main() { etcdmain.Main(os.Args) }
GO
  go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
  go mod tidy >&2
  CGO_ENABLED=0 go build -trimpath -o "$OUT/etcd.tmp" . >&2
  mv "$OUT/etcd.tmp" "$OUT/etcd"
fi

if [ ! -x "$OUT/kube-apiserver" ]; then
  mkdir -p "$work/kube" && cd "$work/kube"
  cat > go.mod <<GOMOD
module allot.local/build-kube

go 1.26.0

require k8s.io/kubernetes $KUBE_VERSION
GOMOD
  cat > main.go <<'GO'
package main

import _ "k8s.io/kubernetes/cmd/kube-apiserver"

func main() {}
GO
  # The staging modules are required at exactly v0.0.0 by k8s.io/kubernetes; pin every one of them
  # (not k8s.io/utils and the like, whose v0.0.0-<date>-<hash> pseudo-versions are real).
  go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" > kube.json
  gomod=$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' kube.json)
  for m in $(grep -oE '^\s*k8s\.io/[a-z0-9-]+ v0\.0\.0(\s|$)' "$gomod" | awk '{print $1}' | sort -u); do
    go mod edit -replace "$m=$m@$staging_version"
  done
  go mod tidy >&2
  # Build the real command package, not the blank-import shim.
  CGO_ENABLED=0 go build -trimpath -o "$OUT/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver >&2
  mv "$OUT/kube-apiserver.tmp" "$OUT/kube-apiserver"
fi
echo "$OUT"
