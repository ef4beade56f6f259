#!/usr/bin/env bash
# Runs each peer queue (bench/peers, a module of its own) and the matching
# Euterpe burn-down back to back, EUTERPE_PEER_ROUNDS times (default 1,
# alternating which goes first), and prints one table of the ratios.
# Figures on a shared machine move between runs; a ratio taken from two
# runs a few seconds apart moves much less. EUTERPE_BENCH_JOBS and the
# other EUTERPE_BENCH_* variables size both sides alike.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${EUTERPE_PEER_ROUNDS:-1}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# name         euterpe package   euterpe benchmark       peer benchmark
pairs=(
  "Postgres    ./central/inbox   BurnDown/postgres$      River"
  "SQLite      ./central/inbox   BurnDown/sqlite$        Goqite"
  "Redis       ./edge/worker     BurnDown$               Asynq"
)

# jobs prints the jobs/s figure of the first benchmark line in go test output.
jobs() { awk '/^Benchmark/ { for (i = 2; i < NF; i++) if ($(i+1) == "jobs/s") { print $i; exit } }'; }
p99() { awk '/^Benchmark/ { for (i = 2; i < NF; i++) if ($(i+1) == "claim-p99-ms") { print $i; exit } }'; }

euterpe() {
  CGO_ENABLED=0 go test -run '^$' -bench "$2" -benchtime 1x -timeout 60m "$1" 2>&1 | tee >(cat >&2)
}
peer() {
  (cd bench/peers && CGO_ENABLED=0 go test -run '^$' -bench "^Benchmark$1\$" -benchtime 1x -timeout 60m . 2>&1) | tee >(cat >&2)
}

for ((r = 1; r <= rounds; r++)); do
  for line in "${pairs[@]}"; do
    read -r name pkg bench other <<<"$line"
    echo "== round $r: $name: Euterpe $pkg $bench vs $other" >&2
    if ((r % 2)); then
      p=$(peer "$other"); e=$(euterpe "$pkg" "$bench")
    else
      e=$(euterpe "$pkg" "$bench"); p=$(peer "$other")
    fi
    ej=$(jobs <<<"$e"); pj=$(jobs <<<"$p"); lat=$(p99 <<<"$e")
    [ -n "$ej" ] && [ -n "$pj" ] || { echo "bench-peers: no jobs/s figure for $name" >&2; exit 1; }
    echo "$r $name $ej ${lat:--} $other $pj" >>"$out"
  done
done

echo
echo "| round | queue | Euterpe jobs/s | Euterpe claim p99 ms | peer | peer jobs/s | ratio |"
echo "|---|---|---|---|---|---|---|"
awk '{ printf "| %s | %s | %.0f | %s | %s | %.0f | %.2f× |\n", $1, $2, $3, $4, $5, $6, $3 / $6 }' "$out"
