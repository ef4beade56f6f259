#!/usr/bin/env bash
# Checks that every cross-built program is a static aarch64 ELF and, where
# qemu-user is installed, that its `version` subcommand runs under it.
set -euo pipefail
dir=$1; shift
for p in "$@"; do
  f="$dir/$p"
  [ -f "$f" ] || { echo "missing $f" >&2; exit 1; }
  # ELF header: class 64-bit (byte 4 = 2), machine EM_AARCH64 = 0xb7 (bytes 18-19, little-endian).
  magic=$(od -An -tx1 -N4 "$f" | tr -d ' \n')
  class=$(od -An -tx1 -j4 -N1 "$f" | tr -d ' \n')
  mach=$(od -An -tx1 -j18 -N2 "$f" | tr -d ' \n')
  [ "$magic" = 7f454c46 ] && [ "$class" = 02 ] && [ "$mach" = b700 ] || { echo "$f is not a 64-bit aarch64 ELF" >&2; exit 1; }
  # A static binary has no PT_INTERP program header, hence no ".interp"/dynamic loader path.
  if grep -aq 'ld-linux-aarch64' "$f"; then echo "$f is dynamically linked" >&2; exit 1; fi
  if command -v qemu-aarch64-static >/dev/null 2>&1 || command -v qemu-aarch64 >/dev/null 2>&1; then
    q=$(command -v qemu-aarch64-static || command -v qemu-aarch64)
    printf '%s under %s: ' "$p" "$(basename "$q")"
    "$q" "$f" version
  else
    echo "$p: static aarch64 ELF (qemu-user not installed; not run)"
  fi
done
