#!/usr/bin/env bash
# Builds real Kubernetes binaries and etcd from the Go module proxy into a cache directory keyed
# by version, for the Kubernetes-mode tests and the real-node harness (test/realnode). Idempotent:
# prints the directory and exits at once when the binaries are already there.
#
#   hack/build-kube.sh            -> prints $ALLOT_CACHE/kube-v1.36.3-etcd-v3.6.6
#
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl are built by one
# `go build` so they share compilation (about 25 minutes cold on 2 cores, most of it shared).
# The test harness (test/k8senv) looks for the binaries there, or in $KUBEBUILDER_ASSETS.
set -euo pipefail
KUBE_VERSION=${KUBE_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.6}
CACHE=${ALLOT_CACHE:-$HOME/.cache/allot}
OUT="$CACHE/kube-$KUBE_VERSION-etcd-$ETCD_VERSION"
KUBE_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)

# A binary that does not run (e.g. an etcd built by an older version of this script, which
# panicked at start, or a build cut off half way) is rebuilt rather than trusted.
[ -x "$OUT/etcd" ] && ! "$OUT/etcd" --version >/dev/null 2>&1 && rm -f "$OUT/etcd"
missing=()
for c in "${KUBE_CMDS[@]}"; do
  if [ -x "$OUT/$c" ] && ! "$OUT/$c" --version >/dev/null 2>&1 && [ "$c" != kubectl ]; then rm -f "$OUT/$c"; fi
  [ -x "$OUT/$c" ] || missing+=("$c")
done
if [ ${#missing[@]} -eq 0 ] && [ -x "$OUT/etcd" ]; then echo "$OUT"; exit 0; fi
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

if [ ${#missing[@]} -gt 0 ]; then
  mkdir -p "$work/kube" && cd "$work/kube"
  cat > go.mod <<GOMOD
module allot.local/build-kube

go 1.26.0

require k8s.io/kubernetes $KUBE_VERSION
GOMOD
  {
    echo '//go:build tools'
    echo
    echo 'package tools'
    echo
    echo 'import ('
    for c in "${KUBE_CMDS[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$c\""; done
    echo ')'
  } > tools.go
  # The staging modules are required at exactly v0.0.0 by k8s.io/kubernetes; pin every one of them
  # (not k8s.io/utils and the like, whose v0.0.0-<date>-<hash> pseudo-versions are real).
  go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" > kube.json
  gomod=$(sed -n 's/.*"GoMod": "\(.*\)".*/\1/p' kube.json)
  for m in $(grep -oE '^\s*k8s\.io/[a-z0-9-]+ v0\.0\.0(\s|$)' "$gomod" | awk '{print $1}' | sort -u); do
    go mod edit -replace "$m=$m@$staging_version"
  done
  go mod tidy -tags tools >&2 || go mod tidy >&2
  minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  ldflags="-X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  pkgs=(); for c in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  mkdir -p "$work/out"
  # One build for all commands: they share almost every package.
  CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags "$ldflags" -o "$work/out/" "${pkgs[@]}" >&2
  for c in "${missing[@]}"; do mv "$work/out/$c" "$OUT/$c"; done
fi
echo "$OUT"
