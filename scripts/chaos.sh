#!/usr/bin/env bash
# The chaos suite (`make chaos`; `make chaos-short` in CI): real processes
# under random faults, then an audit of every job and event, one table per
# run in .run/chaos/; then every fuzz target for a bounded time.
#
# Sizes (full run defaults; chaos-short sets small ones):
#   EUTERPE_CHAOS_CENTRAL_JOBS (10000 per engine), EUTERPE_CHAOS_EDGE_JOBS
#   (20000), EUTERPE_CHAOS_SSE_CLIENTS (50), EUTERPE_CHAOS_SYNC_JOBS (2000),
#   EUTERPE_CHAOS_PIPELINE_JOBS (1000 per engine), EUTERPE_CHAOS_FUZZTIME
#   (30s per fuzz target), EUTERPE_CHAOS_FUZZ_GUIDED (1: coverage-guided
#   fuzzing; chaos-short: 0), EUTERPE_CHAOS_SEED (replay),
#   EUTERPE_CHAOS_CRASH_TESTS (1: also the pipeline worker's SIGKILL test).
# The Postgres run restarts the clone's private server (.run/pg): nothing
# else should be using it meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
set -a; . ./.run/env; set +a
export EUTERPE_CHAOS_OUT="${EUTERPE_CHAOS_OUT:-$PWD/.run/chaos}"
# The clone's cluster is .run/pg, or where .run/pg.dir says when the postgres
# user cannot reach the clone (scripts/services.sh, pg_place).
pgdata="$PWD/.run/pg"
if [ -s .run/pg.dir ]; then pgdata=$(cat .run/pg.dir); fi
if [ -z "${EUTERPE_CHAOS_PGDATA:-}" ] && [ -f "$pgdata/PG_VERSION" ]; then export EUTERPE_CHAOS_PGDATA="$pgdata"; fi
mkdir -p "$EUTERPE_CHAOS_OUT"
marker=$(mktemp); fuzzbin=$(mktemp -d); trap 'rm -rf "$marker" "$fuzzbin"' EXIT
fuzztime="${EUTERPE_CHAOS_FUZZTIME:-30s}"
timeout="${EUTERPE_CHAOS_TIMEOUT:-60m}"

status=0
timings=""
step() { # step NAME START_SECONDS: record how long a step took
  local t=$((SECONDS - $2))
  echo "chaos: $1 took ${t}s"
  timings="${timings}chaos: $1: ${t}s
"
}
# The chaos runs: the race detector stays off, so the daemons run at the
# speed they ship at (their code is raced by `make test`). One package at
# a time (-p 1): central's scenario restarts the Postgres server every
# scenario shares, which would cut another package's run short in the
# middle of its set-up.
begin=$SECONDS
go test -p 1 -tags chaos -count=1 -v -timeout "$timeout" -run '^TestChaos' ./cmd/euterpe-central/ ./sync/e2e/ \
  | tee "$EUTERPE_CHAOS_OUT/last-run.log" | grep -E '^(=== RUN|--- |PASS|FAIL|ok )|chaos .*(seed|audit|report written)|recovered in' || true
grep -q '^--- FAIL' "$EUTERPE_CHAOS_OUT/last-run.log" && status=1
grep -qE '^(FAIL|panic:)' "$EUTERPE_CHAOS_OUT/last-run.log" && status=1
step "scenarios (build and run)" "$begin"

# The planned-moment crash test of the pipeline worker (SIGKILL mid-stage)
# runs with the full suite too (`make test` runs it as well, so the short
# run leaves it out: EUTERPE_CHAOS_CRASH_TESTS=0).
if [ "${EUTERPE_CHAOS_CRASH_TESTS:-1}" = 1 ]; then
  begin=$SECONDS
  go test -count=1 -timeout "$timeout" -run 'SIGKILL' ./central/pipeline/ || status=1
  step "pipeline SIGKILL test" "$begin"
fi

# Fuzzing. Each package's test binary is built once, then its targets run
# from the package directory (where go test would run them: failing inputs
# go to its testdata/fuzz), two at a time with one fuzz worker each, so a
# target's fixed costs (its database or Redis fixture, the baseline coverage
# of its seed corpus) overlap another's. The full run builds each with
# coverage instrumentation (`go test -c -fuzz`, coverage-guided fuzzing);
# the short run (EUTERPE_CHAOS_FUZZ_GUIDED=0) builds plain test binaries in
# one go, sharing the build cache of the scenarios, and mutates the seeds
# without coverage guidance: instrumenting every dependency once more is
# most of what fuzzing would cost it, for 200 inputs a target.
# Go 1.26's fuzz coordinator can report a bare "context deadline exceeded"
# when -fuzztime runs out while a worker is mid-call (golang/go#75804, fixed
# in 1.27): a failure with that line and no failing input written is run
# again (up to three times; a count such as -fuzztime 200x has no deadline
# to race); anything else fails.
fuzz_one() { # fuzz_one PKG FN: prints its outcome, returns non-zero on failure
  local bin=${fuzzbins[$1]} out rc try
  for try in 1 2 3; do
    rc=0
    out=$(cd "$1" && "$bin" -test.run '^$' -test.fuzz "^$2\$" -test.fuzztime "$fuzztime" -test.parallel 1 \
      -test.fuzzcachedir "$fuzzcache/${1#./}" 2>&1) || rc=$?
    if [ "$rc" = 0 ]; then echo "fuzz $2 ($1): $(printf '%s\n' "$out" | grep '^fuzz: elapsed' | tail -1)"; return 0; fi
    if [ "$try" != 3 ] && printf '%s\n' "$out" | grep -q 'context deadline exceeded' &&
       ! printf '%s\n' "$out" | grep -qE 'Failing input written|panic:|_test\.go:[0-9]+:'; then
      echo "fuzz $2: the coordinator's deadline race, no failing input; running it again"
      continue
    fi
    echo "fuzz $2 ($1): FAILED"; printf '%s\n' "$out" | tail -40
    return 1
  done
  return 1
}

targets="./edge/gateway:FuzzParseCreate ./edge/gateway:FuzzCreateJobHTTP
./central/api:FuzzTranscodeBody ./edge/library/api:FuzzDeleteBody
./sync/wire:FuzzDecode ./sync/ingest:FuzzBatchBody
./central/pipeline/pipelinerole:FuzzSubmitBody
./edge/library/store:FuzzDecodeGroupCursor ./edge/library/store:FuzzDecodeIDCursor ./edge/library/store:FuzzParseGroupKey"
# The corpus the fuzzer grows is kept where go test keeps it.
fuzzcache="$(go env GOCACHE)/fuzz/$(go list -m)"
guided="${EUTERPE_CHAOS_FUZZ_GUIDED:-1}"
# go test -c -o DIR/ names binaries for their package: packages of one name
# (two "api") are built into separate directories.
declare -A fuzzbins=() seen=()
groups=()
for pkg in $(printf '%s\n' $targets | cut -d: -f1 | sort -u); do
  base=$(basename "$pkg"); n=${seen[$base]:-0}; seen[$base]=$((n + 1))
  fuzzbins[$pkg]="$fuzzbin/$n/$base.test"; groups[n]="${groups[n]:-} $pkg"
done
begin=$SECONDS
for n in "${!groups[@]}"; do
  if [ "$guided" = 1 ]; then
    for pkg in ${groups[n]}; do go test -c -fuzz . -o "$fuzzbin/$n/" "$pkg" || status=1; done
  else
    go test -c -o "$fuzzbin/$n/" ${groups[n]} || status=1
  fi
done
step "fuzz builds" "$begin"
begin=$SECONDS
set -- $targets
while [ $# -gt 0 ]; do
  pids=""
  for target in "$1" "${2:-}"; do
    [ -n "$target" ] || continue
    fuzz_one "${target%%:*}" "${target##*:}" >"$fuzzbin/${target##*:}.out" 2>&1 &
    pids="$pids $!:${target##*:}"
  done
  for p in $pids; do
    wait "${p%%:*}" || status=1
    cat "$fuzzbin/${p##*:}.out"
  done
  shift; [ $# -gt 0 ] && shift
done
step "fuzz runs ($fuzztime per target)" "$begin"
printf '%s' "$timings"

for f in $(find "$EUTERPE_CHAOS_OUT" -name '*.md' -newer "$marker" | sort); do echo; cat "$f"; done
if [ "$status" != 0 ]; then echo "chaos: FAILED (see $EUTERPE_CHAOS_OUT/last-run.log)"; fi
exit "$status"
