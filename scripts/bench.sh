#!/usr/bin/env bash
# Runs every benchmark once at full size and prints a table per package.
# Sizes can be lowered for a quick look, e.g.
#   EUTERPE_BENCH_JOBS=5000 make bench
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=$(grep -rl --include='*_test.go' '^func Benchmark' . | xargs -n1 dirname | sort -u)
[ -n "$pkgs" ] || { echo "no benchmarks"; exit 0; }
go build -o .run/benchtable ./scripts/benchtable
# -benchtime=1x: each benchmark sizes its own workload and reports rates.
CGO_ENABLED=0 go test -run '^$' -bench . -benchtime=1x -timeout 60m $pkgs 2>&1 | .run/benchtable
