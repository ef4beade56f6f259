#!/usr/bin/env bash
# `make run`: brings up a local Euterpe stack from bin/ and shows jobs flowing
# end to end, then keeps the daemons running until Ctrl-C.
#
#   edge     euterpe-edge serve on 127.0.0.1:8070 (or the next free port), on
#            database 0 of this clone's private Redis (EUTERPE_RUN_REDIS_URL,
#            from scripts/services.sh), a demo `tool` backend, and a media
#            library over .run/demo/library
#   central  euterpe-central serve on 127.0.0.1:8090 (or the next free port) on
#            embedded SQLite, transcoding a generated tone from this clone's
#            private S3-compatible server (versitygw), and receiving the
#            edge's job events through sync (the edge is registered with it)
#
# Everything it writes stays under .run/: state directories, SQLite files,
# scratch files, logs (.run/demo), Redis and S3 data (.run/redis, .run/s3).
# It never uses a server or port it was not given: a daemon already on 8070
# or 8090 (a production edge on the same device) is left alone.
#
# EUTERPE_RUN_ONCE=1 stops everything after the demo instead of waiting.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ports.sh
set -a; . ./.run/env; set +a
: "${EUTERPE_RUN_REDIS_URL:?run scripts/services.sh up redis first}"
RUN=$(pwd -P)/.run/demo
mkdir -p "$RUN/edge-state" "$RUN/central-state" "$RUN/central-tmp" "$RUN/library/a" "$RUN/library/b"
pids=()
stop() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop EXIT
trap 'exit 0' INT TERM

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# start_daemon NAME PREFERRED_PORT VAR LOG ENV=VALUE... -- COMMAND...: starts
# COMMAND with ENV on a free port (PREFERRED when free), passed to it as
# VAR=127.0.0.1:PORT, waits until its /ready answers and sets PORT_<NAME>.
# The port lock is held until the daemon listens, and the address is checked
# to belong to the process started here, so two runs (or a running
# production daemon) are never confused with this one.
start_daemon() {
  local name=$1 pref=$2 var=$3 log=$4 port pid envs=()
  shift 4
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  lock_ports
  port=$(free_port "$pref")
  env "${envs[@]}" "$var=127.0.0.1:$port" "$@" >"$log" 2>&1 8>&- &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 1 300); do
    if ! kill -0 "$pid" 2>/dev/null; then
      unlock_ports
      echo "$name exited; last log lines:" >&2; tail -20 "$log" >&2; exit 1
    fi
    listens "$pid" "$port" && curl -fsS --max-time 2 "http://127.0.0.1:$port/ready" >/dev/null 2>&1 && break
    sleep 0.2
  done
  unlock_ports
  if ! listens "$pid" "$port"; then
    echo "$name did not become ready on port $port; last log lines:" >&2; tail -20 "$log" >&2; exit 1
  fi
  [ "$port" = "$pref" ] || echo "port $pref is taken: $name listens on $port instead"
  printf -v "PORT_${name//-/_}" %s "$port"
}

step "starting euterpe-central on embedded SQLite (logs: $RUN/central.log)"
# Private addresses are allowed because the demo's storage is on loopback.
start_daemon euterpe-central 8090 EUTERPE_CENTRAL_ADDR "$RUN/central.log" \
  EUTERPE_STATE_DIR="$RUN/central-state" \
  EUTERPE_RUNNER_TEMP_DIR="$RUN/central-tmp" \
  EUTERPE_WEBHOOK_ALLOW_PRIVATE=true \
  -- bin/euterpe-central serve
CENTRAL=http://127.0.0.1:$PORT_euterpe_central
curl -fsS "$CENTRAL/ready"; echo

step "registering the demo edge and an operator with central"
# The secrets are printed once by central; the demo keeps them in 0600 files
# under .run/demo, as an operator would in /etc/euterpe.
central_cli() { EUTERPE_STATE_DIR="$RUN/central-state" bin/euterpe-central "$@"; }
json_field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p"; }
# keep FILE FIELD JSON: FIELD of JSON into FILE (0600), whole or not at all.
keep() {
  local v
  v=$(printf '%s' "$3" | json_field "$2")
  [ -n "$v" ] || { echo "no $2 in central's answer" >&2; exit 1; }
  (umask 077; printf '%s' "$v" >"$1.tmp")
  mv "$1.tmp" "$1"
}
# Registered again unless all three files are there, so a run that stopped
# half-way (central refusing the operator, say) does not leave later runs
# without a token.
if [ ! -s "$RUN/edge-id" ] || [ ! -s "$RUN/sync.secret" ] || [ ! -s "$RUN/operator.token" ]; then
  reg=$(central_cli edge register --name make-run-edge)
  op=$(central_cli operator create --name make-run)
  keep "$RUN/sync.secret" sync_secret "$reg"
  keep "$RUN/operator.token" token "$op"
  keep "$RUN/edge-id" edge_id "$reg"
fi
EDGE_ID=$(cat "$RUN/edge-id")
echo "edge $EDGE_ID registered; its sync secret is in $RUN/sync.secret, the operator token in $RUN/operator.token"

step "starting euterpe-edge, syncing to central (logs: $RUN/edge.log)"
# Two copies of one file, so the library has a duplicate group to show.
printf 'the same bytes\n' >"$RUN/library/a/song.txt"
printf 'the same bytes\n' >"$RUN/library/b/song-copy.txt"
start_daemon euterpe-edge 8070 EUTERPE_EDGE_ADDR "$RUN/edge.log" \
  EUTERPE_REDIS_URL="$EUTERPE_RUN_REDIS_URL" \
  EUTERPE_STATE_DIR="$RUN/edge-state" \
  EUTERPE_TASK_BACKENDS="tool=exec:$PWD/scripts/demo-tool.sh" \
  EUTERPE_LIBRARY_ROOTS="$RUN/library" \
  EUTERPE_SYNC_URL="$CENTRAL" \
  EUTERPE_SYNC_EDGE_ID="$EDGE_ID" \
  EUTERPE_SYNC_SECRET_FILE="$RUN/sync.secret" \
  EUTERPE_SYNC_HEARTBEAT=5s \
  -- bin/euterpe-edge serve
EDGE=http://127.0.0.1:$PORT_euterpe_edge
export EUTERPE_EDGE_URL=$EDGE
curl -fsS "$EDGE/ready"; echo

step "submitting a job and following its events (euterpectl jobs submit --follow)"
bin/euterpectl jobs submit --task tool --payload '{"text":"hello from make run"}' --follow

step "scanning the media library and listing duplicate groups"
curl -fsS -X POST "$EDGE/api/v1/scans"; echo
for _ in $(seq 1 50); do
  groups=$(curl -fsS "$EDGE/api/v1/duplicates/groups")
  case $groups in *group_key*) break ;; esac
  sleep 0.2
done
echo "$groups"

scripts/run-central-demo.sh "$RUN" "$CENTRAL"

step "the edge's job on central, through sync (euterpectl edges jobs)"
export EUTERPE_CENTRAL_URL=$CENTRAL
EUTERPE_OPERATOR_TOKEN=$(cat "$RUN/operator.token")
export EUTERPE_OPERATOR_TOKEN
for _ in $(seq 1 100); do
  jobs=$(bin/euterpectl edges jobs "$EDGE_ID" 2>/dev/null || true)
  case $jobs in *'"done"'*|*' done'*) break ;; esac
  sleep 0.2
done
printf '%s\n' "$jobs"
case $jobs in *done*) ;; *) echo "the demo job did not reach central; see $RUN/edge.log and $RUN/central.log" >&2; exit 1 ;; esac

step "today's edge_daily report of the demo edge (euterpectl pipeline enqueue)"
# The pipeline queue's built-in job type: the edge's synced events of one UTC
# day, as per-task counts and durations, stored as JSON and CSV.
sub=$(bin/euterpectl pipeline enqueue --type edge_daily --symbol "$EDGE_ID" --asof "$(date -u +%F)")
printf '%s\n' "$sub"
pjob=$(printf '%s' "$sub" | json_field job_id)
for _ in $(seq 1 100); do
  pj=$(bin/euterpectl pipeline get "$pjob")
  case $pj in *'"status":"succeeded"'*|*'"status":"failed"'*|*'"status":"dead_letter"'*) break ;; esac
  sleep 0.2
done
printf '%s\n' "$pj"
case $pj in *'"status":"succeeded"'*) ;; *) echo "the edge_daily job did not succeed; see $RUN/central.log" >&2; exit 1 ;; esac

step "stack is up"
cat <<TXT
  edge     $EDGE   (POST /v1/jobs, GET /v1/jobs/{id}/events, /api/v1/...)
  central  $CENTRAL   (POST /transcode, GET /transcode/status, /openapi.json)
  console  $EDGE/ui/   (edge: jobs, queue health, library)
  redis    $(printf %s "$EUTERPE_RUN_REDIS_URL" | sed 's#://\([^/@:]*\):[^/@]*@#://\1:[REDACTED]@#')
  s3       $EUTERPE_TEST_S3_ENDPOINT   (data in .run/s3/data)
  state    $RUN
  central console  $CENTRAL/ui/   (sign in with the operator token in $RUN/operator.token)
  try:     EUTERPE_EDGE_URL=$EDGE bin/euterpectl jobs submit --task tool --payload '{"n":1}' --follow
           EUTERPE_CENTRAL_URL=$CENTRAL EUTERPE_OPERATOR_TOKEN=\$(cat $RUN/operator.token) bin/euterpectl edges jobs $EDGE_ID
           (same variables) bin/euterpectl pipeline list
TXT
if [ "${EUTERPE_RUN_ONCE:-}" = 1 ]; then exit 0; fi
echo "  press Ctrl-C to stop"
wait
