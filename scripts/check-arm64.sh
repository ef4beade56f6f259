#!/usr/bin/env bash
# Checks that every cross-built program is a static aarch64 ELF and, where
# qemu-user is installed, that its `version` subcommand runs under it and
# prints the version the Makefile stamped.
#   scripts/check-arm64.sh DIR VERSION PROGRAM...
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$1 want=$2; shift 2
files=(); for p in "$@"; do files+=("$dir/$p"); done
go run ./scripts/elfcheck "${files[@]}"
q=$(command -v qemu-aarch64-static || command -v qemu-aarch64 || true)
if [ -z "$q" ]; then
  echo "qemu-user is not installed: the programs were not run (apt-get install qemu-user-static)"
  exit 0
fi
for p in "$@"; do
  got=$("$q" "$dir/$p" version)
  if [ "$got" != "$want" ]; then
    echo "$p under $(basename "$q") printed '$got', want '$want'" >&2
    exit 1
  fi
  echo "$p under $(basename "$q"): version $got"
done
