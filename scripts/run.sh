#!/usr/bin/env bash
# `make run`: brings up a local Euterpe stack from bin/ and shows jobs flowing
# end to end, then keeps the daemons running until Ctrl-C.
#
#   edge     euterpe-edge serve on 127.0.0.1:8070 (Redis from scripts/services.sh),
#            a demo `tool` backend, and a media library over .run/demo/library
#   central  euterpe-central serve on 127.0.0.1:8090 on embedded SQLite, transcoding
#            a generated tone from the local S3-compatible server (versitygw)
#
# EUTERPE_RUN_ONCE=1 stops everything after the demo instead of waiting.
set -euo pipefail
cd "$(dirname "$0")/.."
set -a; . ./.run/env; set +a
RUN=$PWD/.run/demo
mkdir -p "$RUN/edge-state" "$RUN/central-state" "$RUN/library/a" "$RUN/library/b"
pids=()
stop() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop EXIT
trap 'exit 0' INT TERM

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

wait_ready() { # URL NAME LOG
  for _ in $(seq 1 150); do
    curl -fsS "$1/ready" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "$2 did not become ready; last log lines:" >&2; tail -20 "$3" >&2; exit 1
}

step "starting euterpe-edge (logs: $RUN/edge.log)"
# Two copies of one file, so the library has a duplicate group to show.
printf 'the same bytes\n' >"$RUN/library/a/song.txt"
printf 'the same bytes\n' >"$RUN/library/b/song-copy.txt"
EUTERPE_REDIS_URL=$EUTERPE_TEST_REDIS_URL \
EUTERPE_STATE_DIR=$RUN/edge-state \
EUTERPE_TASK_BACKENDS="tool=exec:$PWD/scripts/demo-tool.sh" \
EUTERPE_LIBRARY_ROOTS=$RUN/library \
  bin/euterpe-edge serve >"$RUN/edge.log" 2>&1 &
pids+=($!)
wait_ready http://127.0.0.1:8070 euterpe-edge "$RUN/edge.log"
curl -fsS http://127.0.0.1:8070/ready; echo

step "submitting a job and following its events (euterpectl jobs submit --follow)"
bin/euterpectl jobs submit --task tool --payload '{"text":"hello from make run"}' --follow

step "scanning the media library and listing duplicate groups"
curl -fsS -X POST http://127.0.0.1:8070/api/v1/scans; echo
for _ in $(seq 1 50); do
  groups=$(curl -fsS http://127.0.0.1:8070/api/v1/duplicates/groups)
  case $groups in *group_key*) break ;; esac
  sleep 0.2
done
echo "$groups"

step "starting euterpe-central on embedded SQLite (logs: $RUN/central.log)"
# Private addresses are allowed because the demo's storage is on loopback.
EUTERPE_STATE_DIR=$RUN/central-state EUTERPE_WEBHOOK_ALLOW_PRIVATE=true bin/euterpe-central serve >"$RUN/central.log" 2>&1 &
pids+=($!)
wait_ready http://127.0.0.1:8090 euterpe-central "$RUN/central.log"
curl -fsS http://127.0.0.1:8090/ready; echo

scripts/run-central-demo.sh "$RUN"

step "stack is up"
cat <<TXT
  edge     http://127.0.0.1:8070   (POST /v1/jobs, GET /v1/jobs/{id}/events, /api/v1/...)
  central  http://127.0.0.1:8090   (POST /transcode, GET /transcode/status, /openapi.json)
  try:     bin/euterpectl jobs submit --task tool --payload '{"n":1}' --follow
TXT
if [ "${EUTERPE_RUN_ONCE:-}" = 1 ]; then exit 0; fi
echo "  press Ctrl-C to stop"
wait
