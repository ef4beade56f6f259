#!/usr/bin/env bash
# Starts the services Euterpe's tests and `make run` need, each a private
# instance of this clone, then writes their addresses to .run/env for the
# Makefile to source.
#
#   scripts/services.sh up      Redis, a Redis 6.0 built from source, Postgres,
#                               the S3 server, and the programs tests call
#   scripts/services.sh down    stop only what this script started
#
# Private means: on a loopback port nothing else listens on (the usual one
# when free, else the next free one), with its data, pid and log under this
# clone's .run/, started from the system packages (installed with apt-get
# when running as root; otherwise the exact command to run is printed and
# the script fails). A server already running on a default port (a
# production Redis on 6379, say) is never used unless named:
#
#   EUTERPE_TEST_REDIS_URL      the Redis tests use (databases 1..15, flushed
#                               only while they hold nothing but test keys)
#   EUTERPE_RUN_REDIS_URL       the Redis `make run`'s edge uses (its db 0)
#   EUTERPE_TEST_POSTGRES_URL   the Postgres tests create their databases on
#   EUTERPE_TEST_S3_ENDPOINT    the S3 server (with EUTERPE_TEST_S3_ACCESS_KEY
#                               and EUTERPE_TEST_S3_SECRET_KEY)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ports.sh
RUN="$(pwd -P)/.run"
mkdir -p "$RUN"
ENVF="$RUN/env"

log() { printf 'services: %s\n' "$*" >&2; }

# exp NAME VALUE: one line of .run/env, quoted for the shell.
exp() { printf 'export %s=%q\n' "$1" "$2"; }

# named VAR FILE: whether the user named VAR, i.e. it is set and is not the
# address of this clone's own private instance (recorded in FILE), which it
# is when .run/env was sourced into the calling shell.
named() {
  local v=${!1:-}
  [ -n "$v" ] && [ "$v" != "$(cat "$2" 2>/dev/null || true)" ]
}

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

# redis_dir CLI PORT: the data directory of the Redis answering on PORT
# (bounded: whatever listens there may not be a Redis, and may never answer).
redis_dir() { timeout 3 "$1" -h 127.0.0.1 -p "$2" config get dir 2>/dev/null | sed -n 2p; }

# redis_private DIR PREFERRED SERVER CLI: prints the port of this clone's
# Redis with its data in DIR, starting it when it is not running. A server
# is recognised as ours by its data directory, never by its port alone.
redis_private() {
  local dir=$1 pref=$2 server=$3 cli=$4 port
  mkdir -p "$dir"
  for port in "$(cat "$dir/port" 2>/dev/null || true)" "$pref"; do
    if [ -n "$port" ] && [ "$(redis_dir "$cli" "$port")" = "$dir" ]; then
      echo "$port" >"$dir/port"; echo "$port"; return 0
    fi
  done
  lock_ports
  port=$(free_port "$pref")
  log "starting private redis ($(basename "$dir")) on 127.0.0.1:$port, data in $dir"
  "$server" --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
    --dir "$dir" --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >/dev/null
  for _ in $(seq 1 100); do
    [ "$(redis_dir "$cli" "$port")" = "$dir" ] && break
    sleep 0.1
  done
  unlock_ports
  if [ "$(redis_dir "$cli" "$port")" != "$dir" ]; then
    log "redis did not start on port $port; see $dir/redis.log"; exit 1
  fi
  echo "$port" >"$dir/port"
  echo "$port"
}

# The Redis of the tests and the one of `make run` are this clone's private
# server unless named; the demo edge uses its database 0, tests 1..15.
redis_up() {
  local port="" url
  if ! named EUTERPE_TEST_REDIS_URL "$RUN/redis/url" || ! named EUTERPE_RUN_REDIS_URL "$RUN/redis/url"; then
    need_pkg redis-server redis-server
    port=$(redis_private "$RUN/redis" 6390 redis-server redis-cli)
    url=redis://127.0.0.1:$port/0
    echo "$url" >"$RUN/redis/url"
  fi
  if named EUTERPE_TEST_REDIS_URL "$RUN/redis/url"; then
    log "tests use the named EUTERPE_TEST_REDIS_URL (they refuse to flush a database holding other keys)"
    exp EUTERPE_TEST_REDIS_URL "$EUTERPE_TEST_REDIS_URL"
  else
    exp EUTERPE_TEST_REDIS_URL "$url"
  fi
  if named EUTERPE_RUN_REDIS_URL "$RUN/redis/url"; then
    log "make run uses the named EUTERPE_RUN_REDIS_URL"
    exp EUTERPE_RUN_REDIS_URL "$EUTERPE_RUN_REDIS_URL"
  else
    exp EUTERPE_RUN_REDIS_URL "$url"
  fi
}

# Redis 6.0.16 is what JetPack 6 (Ubuntu 22.04) ships; the package archives
# here only have 7.x, so the unmodified source next to the repository
# (../shared/vendor, or EUTERPE_REDIS6_TARBALL) is built once into
# .run/redis6 and started privately (port 6391 when free). The edge's Redis
# tests run on it as well as on the Redis above (EUTERPE_TEST_REDIS6_URL).
# Without the tarball nothing is exported: the 6.0 tests skip, or fail
# under CI=true.
redis6_up() {
  local dir="$RUN/redis6" ver=6.0.16 port
  local tarball=${EUTERPE_REDIS6_TARBALL:-"$PWD/../shared/vendor/redis-$ver.tar.gz"}
  local bin="$dir/redis-$ver/src/redis-server"
  if named EUTERPE_TEST_REDIS6_URL "$dir/url"; then
    log "tests use the named EUTERPE_TEST_REDIS6_URL"
    exp EUTERPE_TEST_REDIS6_URL "$EUTERPE_TEST_REDIS6_URL"; return 0
  fi
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
  port=$(redis_private "$dir" 6391 "$bin" "$dir/redis-$ver/src/redis-cli")
  if ! "$dir/redis-$ver/src/redis-cli" -p "$port" info server 2>/dev/null | grep -q "redis_version:$ver"; then
    log "the redis on port $port is not redis $ver"; exit 1
  fi
  echo "redis://127.0.0.1:$port/0" >"$dir/url"
  exp EUTERPE_TEST_REDIS6_URL "redis://127.0.0.1:$port/0"
}

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true; }

# as_pg CMD...: runs a Postgres program as the owner of the data directory
# (postgres when running as root: initdb refuses root).
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

# Postgres is private too (an initdb of a few seconds on a fresh clone):
# tests only ever create and drop their own euterpe_t_* databases, but a
# server the user did not name is not theirs to fill.
pg_up() {
  local data="$RUN/pg" bin port
  if named EUTERPE_TEST_POSTGRES_URL "$data.url"; then
    log "tests use the named EUTERPE_TEST_POSTGRES_URL"
    exp EUTERPE_TEST_POSTGRES_URL "$EUTERPE_TEST_POSTGRES_URL"; return 0
  fi
  bin=$(pg_bin)
  if [ -z "$bin" ]; then need_pkg pg_ctlcluster postgresql; bin=$(pg_bin); fi
  if [ -f "$data/postmaster.pid" ] && as_pg "$bin/pg_ctl" status -D "$data" >/dev/null 2>&1; then
    port=$(sed -n 4p "$data/postmaster.pid")
  else
    if [ ! -f "$data/PG_VERSION" ]; then
      log "initialising private postgres in $data"
      mkdir -p "$data"; if [ "$(id -u)" = 0 ]; then chown postgres "$data"; fi
      as_pg "$bin/initdb" -D "$data" -U postgres --auth=trust >/dev/null
    fi
    lock_ports
    port=$(free_port 5440)
    log "starting private postgres on 127.0.0.1:$port, data in $data"
    # The socket's name holds the port, so clones never share one in /tmp.
    as_pg "$bin/pg_ctl" -D "$data" -l "$data/log" -w -o "-p $port -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >/dev/null
    unlock_ports
  fi
  echo "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable" >"$data.url"
  exp EUTERPE_TEST_POSTGRES_URL "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
}

tools_up() {
  need_pkg ffmpeg ffmpeg
  need_pkg b3sum b3sum
  # independent checks of the webhook signature and the README's receiver snippets
  need_pkg python3 python3
  need_pkg node nodejs
  need_pkg openssl openssl
  command -v gcc >/dev/null 2>&1 || need_pkg gcc gcc   # the race detector needs cgo
  # the port checks and `make run`
  need_pkg ss iproute2
  need_pkg curl curl
  # the consoles' browser tests (console/browsertest) drive headless Chromium
  need_pkg chromium chromium
}

s3_up() {
  # versitygw serves a directory over the S3 API with real SigV4 auth.
  local bin port="" dir="$RUN/s3" pid=""
  if named EUTERPE_TEST_S3_ENDPOINT "$dir/url"; then
    log "tests use the named EUTERPE_TEST_S3_ENDPOINT"
    exp EUTERPE_TEST_S3_ENDPOINT "$EUTERPE_TEST_S3_ENDPOINT"
    exp EUTERPE_TEST_S3_ACCESS_KEY "${EUTERPE_TEST_S3_ACCESS_KEY:-}"
    exp EUTERPE_TEST_S3_SECRET_KEY "${EUTERPE_TEST_S3_SECRET_KEY:-}"
    return 0
  fi
  bin=$(command -v versitygw || true)
  if [ -z "$bin" ]; then
    bin="$RUN/bin/versitygw"
    if [ ! -x "$bin" ]; then
      log "building versitygw v1.8.0"
      GOBIN="$RUN/bin" CGO_ENABLED=0 go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
    fi
  fi
  mkdir -p "$dir/data"
  pid=$(cat "$dir/pid" 2>/dev/null || true)
  port=$(cat "$dir/port" 2>/dev/null || true)
  if [ -z "$pid" ] || [ -z "$port" ] || ! listens "$pid" "$port"; then
    lock_ports
    port=$(free_port 7070)
    log "starting versitygw on 127.0.0.1:$port, data in $dir/data"
    ROOT_ACCESS_KEY=euterpe-root ROOT_SECRET_KEY=euterpe-root-secret \
      nohup "$bin" --port "127.0.0.1:$port" posix "$dir/data" >"$dir/log" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/pid"
    for _ in $(seq 1 100); do listens "$pid" "$port" && break; sleep 0.1; done
    unlock_ports
    listens "$pid" "$port" || { log "versitygw did not start on port $port; see $dir/log"; exit 1; }
    echo "$port" >"$dir/port"
  fi
  echo "http://127.0.0.1:$port" >"$dir/url"
  exp EUTERPE_TEST_S3_ENDPOINT "http://127.0.0.1:$port"
  exp EUTERPE_TEST_S3_ACCESS_KEY euterpe-root
  exp EUTERPE_TEST_S3_SECRET_KEY euterpe-root-secret
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
  # Passwords in named URLs stay out of the terminal.
  sed -e 's#://\([^/@:]*\):[^/@]*@#://\1:[REDACTED]@#' -e 's#\(SECRET_KEY=\).*#\1[REDACTED]#' "$ENVF" >&2
}

# stop_pid FILE: stops the process whose pid FILE holds.
stop_pid() { [ -f "$1" ] && kill "$(cat "$1")" 2>/dev/null || true; rm -f "$1"; }

down() {
  stop_pid "$RUN/redis/redis.pid"
  stop_pid "$RUN/redis6/redis.pid"
  stop_pid "$RUN/s3/pid"
  if [ -f "$RUN/pg/postmaster.pid" ]; then
    as_pg "$(pg_bin)/pg_ctl" -D "$RUN/pg" stop -m fast || true
  fi
  rm -f "$ENVF" "$RUN/redis/port" "$RUN/redis6/port" "$RUN/s3/port"
}

case ${1:-up} in
  up) shift || true; up "${1:-all}" ;;
  down) down ;;
  *) echo "usage: $0 up [all|redis|redis6|postgres|s3|tools] | down" >&2; exit 2 ;;
esac
