#!/usr/bin/env bash
# Finds or starts the services and programs Euterpe's tests and `make run`
# need, then writes their addresses to .run/env for the Makefile to source.
#
#   scripts/services.sh up      find or start Redis, Postgres, ffmpeg, the S3 server
#                               and a private Redis 6.0 built from source
#   scripts/services.sh down    stop only what this script started
#
# A service already answering on its default port is used as it is. Where
# none answers, a private instance is started under .run/ from the system
# packages, installing them with apt-get when running as root; otherwise the
# exact command to run is printed and the script fails.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN="$PWD/.run"
mkdir -p "$RUN"
ENVF="$RUN/env"

log() { printf 'services: %s\n' "$*" >&2; }

apt_updated=""
need_pkg() { # need_pkg COMMAND PACKAGE
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" != 0 ]; then
    log "missing $1; install it with: sudo apt-get update && sudo apt-get install -y $2"
    exit 1
  fi
  if [ -z "$apt_updated" ]; then
    log "apt-get update"
    apt-get update -qq >/dev/null
    apt_updated=1
  fi
  log "installing $2"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() { # wait_port PORT NAME
  for _ in $(seq 1 100); do port_open "$1" && return 0; sleep 0.1; done
  log "$2 did not start on port $1"; exit 1
}

# EUTERPE_PRIVATE_SERVICES=1 ignores services on the default ports, to
# exercise the path a fresh machine takes.
private=${EUTERPE_PRIVATE_SERVICES:-}

redis_up() {
  if [ -z "$private" ] && redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; then
    echo "export EUTERPE_TEST_REDIS_URL=redis://127.0.0.1:6379/0"; return
  fi
  need_pkg redis-server redis-server
  local port=6390
  if ! port_open $port; then
    log "starting private redis on 127.0.0.1:$port"
    mkdir -p "$RUN/redis"
    redis-server --daemonize yes --bind 127.0.0.1 --port $port --save "" --appendonly no \
      --dir "$RUN/redis" --pidfile "$RUN/redis/redis.pid" --logfile "$RUN/redis/redis.log" >/dev/null
    wait_port $port redis
  fi
  echo "export EUTERPE_TEST_REDIS_URL=redis://127.0.0.1:$port/0"
}

# Redis 6.0.16 is what JetPack 6 (Ubuntu 22.04) ships; the package archives
# here only have 7.x, so the unmodified source next to the repository
# (../shared/vendor, or EUTERPE_REDIS6_TARBALL) is built once into
# .run/redis6 and started on a private port. The edge's Redis tests run on it
# as well as on the Redis above (EUTERPE_TEST_REDIS6_URL). Without the
# tarball nothing is exported: the 6.0 tests skip, or fail under CI=true.
redis6_up() {
  local port=6391 dir="$RUN/redis6" ver=6.0.16
  local tarball=${EUTERPE_REDIS6_TARBALL:-"$PWD/../shared/vendor/redis-$ver.tar.gz"}
  local bin="$dir/redis-$ver/src/redis-server"
  if [ ! -x "$bin" ]; then
    if [ ! -f "$tarball" ]; then
      log "REDIS 6.0 NOT AVAILABLE: $tarball is missing (set EUTERPE_REDIS6_TARBALL);"
      log "  the edge's Redis 6.0 tests will skip (and fail under CI=true)"
      return 0
    fi
    command -v make >/dev/null 2>&1 || need_pkg make make
    command -v gcc >/dev/null 2>&1 || need_pkg gcc gcc
    log "building redis $ver from $tarball into $dir (once, about 20 s)"
    rm -rf "$dir/redis-$ver"; mkdir -p "$dir"
    tar -xzf "$tarball" -C "$dir"
    if ! make -C "$dir/redis-$ver" -j2 MALLOC=libc BUILD_TLS=no >"$dir/build.log" 2>&1; then
      log "redis $ver build failed; see $dir/build.log"; exit 1
    fi
  fi
  if port_open $port; then
    if ! "$dir/redis-$ver/src/redis-cli" -p $port info server 2>/dev/null | grep -q "redis_version:$ver"; then
      log "port $port is taken by something other than redis $ver"; exit 1
    fi
  else
    log "starting private redis $ver on 127.0.0.1:$port"
    "$bin" --daemonize yes --bind 127.0.0.1 --port $port --save "" --appendonly no \
      --dir "$dir" --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >/dev/null
    wait_port $port "redis $ver"
  fi
  echo "export EUTERPE_TEST_REDIS6_URL=redis://127.0.0.1:$port/0"
}

pg_up() {
  if [ -z "$private" ] && port_open 5432; then
    echo "export EUTERPE_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"; return
  fi
  local port=5440 data="$RUN/pg" bin
  if ! port_open $port; then
    bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
    if [ -z "$bin" ]; then need_pkg pg_ctlcluster postgresql; bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1); fi
    local as=()
    if [ "$(id -u)" = 0 ]; then as=(runuser -u postgres --); fi
    if [ ! -f "$data/PG_VERSION" ]; then
      log "initialising private postgres in $data"
      mkdir -p "$data"; if [ "$(id -u)" = 0 ]; then chown postgres "$data"; fi
      "${as[@]}" "$bin/initdb" -D "$data" -U postgres --auth=trust >/dev/null
    fi
    log "starting private postgres on 127.0.0.1:$port"
    "${as[@]}" "$bin/pg_ctl" -D "$data" -l "$data/log" -w -o "-p $port -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >/dev/null
  fi
  echo "export EUTERPE_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
}

tools_up() {
  need_pkg ffmpeg ffmpeg
  need_pkg b3sum b3sum
  # independent checks of the webhook signature and the README's receiver snippets
  need_pkg python3 python3
  need_pkg node nodejs
  need_pkg openssl openssl
  command -v gcc >/dev/null 2>&1 || need_pkg gcc gcc   # the race detector needs cgo
}

s3_up() {
  # versitygw serves a directory over the S3 API with real SigV4 auth.
  local bin port=7070 dir="$RUN/s3"
  bin=$(command -v versitygw || true)
  if [ -z "$bin" ]; then
    bin="$RUN/bin/versitygw"
    if [ ! -x "$bin" ]; then
      log "building versitygw v1.8.0"
      GOBIN="$RUN/bin" CGO_ENABLED=0 go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
    fi
  fi
  if ! port_open $port; then
    mkdir -p "$dir/data"
    log "starting versitygw on 127.0.0.1:$port"
    ROOT_ACCESS_KEY=euterpe-root ROOT_SECRET_KEY=euterpe-root-secret \
      nohup "$bin" --port 127.0.0.1:$port posix "$dir/data" >"$dir/log" 2>&1 &
    echo $! >"$dir/pid"
    wait_port $port versitygw
  fi
  echo "export EUTERPE_TEST_S3_ENDPOINT=http://127.0.0.1:$port"
  echo "export EUTERPE_TEST_S3_ACCESS_KEY=euterpe-root"
  echo "export EUTERPE_TEST_S3_SECRET_KEY=euterpe-root-secret"
}

up() {
  local what=${1:-all} tmp
  tmp=$(mktemp)
  case $what in
    all) tools_up; redis_up >>"$tmp"; redis6_up >>"$tmp"; pg_up >>"$tmp"; s3_up >>"$tmp" ;;
    redis) redis_up >>"$tmp" ;;
    redis6) redis6_up >>"$tmp" ;;
    postgres) pg_up >>"$tmp" ;;
    s3) s3_up >>"$tmp" ;;
    tools) tools_up ;;
    *) log "unknown service $what"; exit 2 ;;
  esac
  # Merge with what an earlier call found, newest wins.
  touch "$ENVF"
  case $what in # a Redis 6.0 found earlier but not now must not linger
    all|redis6) grep -v EUTERPE_TEST_REDIS6_URL "$ENVF" >"$ENVF.old" || true; mv "$ENVF.old" "$ENVF" ;;
  esac
  cat "$ENVF" "$tmp" | awk -F'[ =]' '{v[$2]=$0} END {for (k in v) print v[k]}' | sort >"$ENVF.new"
  mv "$ENVF.new" "$ENVF"; rm -f "$tmp"
  cat "$ENVF" >&2
}

down() {
  [ -f "$RUN/redis/redis.pid" ] && kill "$(cat "$RUN/redis/redis.pid")" 2>/dev/null || true
  [ -f "$RUN/redis6/redis.pid" ] && kill "$(cat "$RUN/redis6/redis.pid")" 2>/dev/null || true
  [ -f "$RUN/s3/pid" ] && kill "$(cat "$RUN/s3/pid")" 2>/dev/null || true
  if [ -f "$RUN/pg/postmaster.pid" ]; then
    bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$bin/pg_ctl" -D "$RUN/pg" stop -m fast; else "$bin/pg_ctl" -D "$RUN/pg" stop -m fast; fi
  fi
  rm -f "$ENVF"
}

case ${1:-up} in
  up) shift || true; up "${1:-all}" ;;
  down) down ;;
  *) echo "usage: $0 up [all|redis|redis6|postgres|s3|tools] | down" >&2; exit 2 ;;
esac
