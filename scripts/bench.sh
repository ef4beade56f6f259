#!/usr/bin/env bash
# Runs every benchmark at full size and prints one table per package (the
# peer queues in bench/peers are `make bench-peers`).
# Most benchmarks size their own workload (EUTERPE_BENCH_* variables lower
# them for a quick look, e.g. EUTERPE_BENCH_JOBS=5000 make bench) and run
# once; the HTTP and SSE ones are request loops and get a request count.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .run
go build -o .run/benchtable ./scripts/benchtable

# package                    benchmarks                 -benchtime
plan=(
  "./edge/worker             BurnDown                   1x"
  "./edge/gateway            CreateThroughput           20000x"
  "./edge/gateway            EnqueueLatencyPaced        5000x"
  "./cmd/euterpe-edge        SSEFanout                  20x"
  "./cmd/euterpe-edge        IdleRSS                    3x"
  "./cmd/euterpe-edge        SyncRSS                    1x"
  "./sync/ship               .                          1x"
  "./edge/library/executor   .                          1x"
  "./edge/library/store      .                          1x"
  "./edge/library/filehash   Segment                    2s"
  "./central/inbox           .                          1x"
  "./central/outbox          .                          1x"
  "./central/runner          .                          1x"
  "./sync/ingest             Ingest                     1x"
  "./central/pipeline        BurnDown                   1x"
  "./central/pipeline/edgedaily .                        1x"
  "./central/pipeline/pipelinerole SubmitHTTP           20000x"
)
listed=$(printf '%s\n' "${plan[@]}" | awk '{print $1}' | sort -u)
found=$(grep -rl --include='*_test.go' --exclude-dir=peers '^func Benchmark' . | xargs -n1 dirname | sort -u)
missing=$(comm -13 <(echo "$listed") <(echo "$found") || true)
[ -z "$missing" ] || { echo "bench.sh: benchmarks not in the plan: $missing" >&2; exit 1; }

for line in "${plan[@]}"; do
  read -r pkg bench time <<<"$line"
  echo "== $pkg $bench ($time)" >&2
  CGO_ENABLED=0 go test -run '^$' -bench "$bench" -benchtime "$time" -timeout 60m "$pkg"
done 2>&1 | .run/benchtable
