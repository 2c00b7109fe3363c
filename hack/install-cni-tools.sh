#!/usr/bin/env bash
# install-cni-tools.sh: installs cnitool and the reference CNI plugins (bridge, ptp,
# host-local) at pinned versions with `go install` into a cache dir, for the e2e tests and
# the CNI benchmark. Idempotent: a binary already built from the pinned module version (as
# `go version -m` reports it) is kept. Prints the plugin dir (usable as CNI_PATH) on stdout.
#
# Layout (ALLOT_CACHE defaults to $HOME/.cache/allot):
#   $ALLOT_CACHE/cni-<plugins version>/{bridge,ptp,host-local}
#   $ALLOT_CACHE/cni-tools/cnitool
#
# Environment: ALLOT_CACHE, CNITOOL_VERSION, CNI_PLUGINS_VERSION (mk/cni.mk passes its pins).
set -euo pipefail

CNITOOL_VERSION=${CNITOOL_VERSION:-v1.3.0}
CNI_PLUGINS_VERSION=${CNI_PLUGINS_VERSION:-v1.9.1}
cache=${ALLOT_CACHE:-$HOME/.cache/allot}
plugins_dir=$cache/cni-$CNI_PLUGINS_VERSION
tools_dir=$cache/cni-tools

log() { echo "install-cni-tools: $*" >&2; }

command -v go >/dev/null || { log "go is not on PATH"; exit 1; }

# built BIN MODULE VERSION: true when BIN exists and was built from MODULE@VERSION.
built() {
	[[ -x $1 ]] || return 1
	go version -m "$1" 2>/dev/null | awk -v m="$2" -v v="$3" '$1 == "mod" && $2 == m && $3 == v { ok = 1 } END { exit !ok }'
}

# install DIR MODULE VERSION PACKAGE...: go install the packages into DIR unless present.
install() {
	local dir=$1 mod=$2 ver=$3 pkg bin
	shift 3
	mkdir -p "$dir"
	for pkg in "$@"; do
		bin=$dir/${pkg##*/}
		if built "$bin" "$mod" "$ver"; then
			log "$bin is $mod@$ver already"
			continue
		fi
		log "go install $pkg@$ver"
		GOBIN=$dir CGO_ENABLED=0 go install "$pkg@$ver"
	done
}

install "$tools_dir" github.com/containernetworking/cni "$CNITOOL_VERSION" \
	github.com/containernetworking/cni/cnitool
install "$plugins_dir" github.com/containernetworking/plugins "$CNI_PLUGINS_VERSION" \
	github.com/containernetworking/plugins/plugins/main/bridge \
	github.com/containernetworking/plugins/plugins/main/ptp \
	github.com/containernetworking/plugins/plugins/main/loopback \
	github.com/containernetworking/plugins/plugins/meta/portmap \
	github.com/containernetworking/plugins/plugins/ipam/host-local

echo "$plugins_dir"
