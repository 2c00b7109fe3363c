#!/usr/bin/env bash
# Installs the Debian packages the tests need, only those whose commands are missing.
# Usage: install-deps.sh [extra-package ...]
set -euo pipefail
declare -A want=( [ip]=iproute2 [protoc]=protobuf-compiler [unshare]=util-linux [column]=bsdextrautils [mkfs.ext4]=e2fsprogs )
for extra in "$@"; do want["pkg:$extra"]=$extra; done
missing=()
for cmd in "${!want[@]}"; do
  pkg=${want[$cmd]}
  if [[ $cmd == pkg:* ]]; then
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  else
    command -v "$cmd" >/dev/null 2>&1 || missing+=("$pkg")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "install-deps: missing Debian packages: ${missing[*]} (run as root, or install them yourself)" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
