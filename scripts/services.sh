#!/usr/bin/env bash
# Starts the services Euterpe's tests and `make run` need, each a private
# instance of this clone, then writes their addresses to .run/env for the
# Makefile to source.
#
#   scripts/services.sh up      Redis, a Redis 6.0 built from source, Postgres,
#                               the S3 server, and the programs tests call
#   scripts/services.sh up run-tools   only the programs `make run` calls
#   scripts/services.sh down    stop only what this script started
#
# Private means: on a loopback port nothing else listens on (the usual one
# when free, else the next free one), with its data, pid and log under this
# clone's .run/ (Postgres's elsewhere when, as root, the postgres user
# cannot reach .run/: see pg_place), started from the system packages
# (installed with apt-get when running as root; otherwise the exact command
# to run is printed and the script fails). A server already running on a
# default port (a production Redis on 6379, say) is never used unless named:
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
apt_install() { # apt_install PACKAGE (as root)
  if [ -z "$apt_updated" ]; then
    log "apt-get update"
    apt-get update -qq >/dev/null
    apt_updated=1
  fi
  log "installing $1"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null
}
need_pkg() { # need_pkg COMMAND PACKAGE
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" != 0 ]; then
    log "missing $1; install it with: sudo apt-get update && sudo apt-get install -y $2"
    exit 1
  fi
  apt_install "$2"
}

# runs_in PID DIR: whether process PID is alive with DIR as its working
# directory (Redis and Postgres run in their data directory). A pid file
# left by a process that is gone (SIGKILL, OOM, a container restart) may
# name a pid the system has given to another program since, which must
# never be signalled or taken for our server.
runs_in() {
  case $1 in '' | *[!0-9]*) return 1 ;; esac
  [ "$(readlink "/proc/$1/cwd" 2>/dev/null)" = "$(readlink -f "$2")" ]
}

# has_arg PID ARG: whether process PID is alive with ARG among its arguments.
has_arg() {
  case $1 in '' | *[!0-9]*) return 1 ;; esac
  tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | grep -qxF -- "$2"
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
    --dir "$dir" --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >/dev/null 8>&-
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

# redis7_check PORT: the tests' main Redis is meant to be Redis 7 or newer
# (the 6.0 one runs beside it); apt's redis-server is 6.0 on Ubuntu 22.04
# and Debian 11, where the edge's Redis tests would only repeat the 6.0
# run. A warning, and under CI=true a failure.
redis7_check() {
  local ver
  ver=$(timeout 3 redis-cli -h 127.0.0.1 -p "$1" info server 2>/dev/null | tr -d '\r' | sed -n 's/^redis_version://p')
  case $ver in '' | [7-9].* | [1-9][0-9]*) return 0 ;; esac
  log "WARNING: the private Redis is redis-server $ver, older than 7: the edge's Redis 7 paths"
  log "  (XAUTOCLAIM) go untested, its Redis tests repeat the Redis 6.0 run. Install redis-server 7"
  log "  or newer (packages.redis.io), or name a Redis >= 7 with EUTERPE_TEST_REDIS_URL."
  if [ "${CI:-}" = true ]; then
    log "under CI=true the Redis 7 paths must be tested: failing"
    exit 1
  fi
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
    redis7_check "$port"
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

# pg_bin: the programs of the newest Postgres server installed. A client
# package alone (postgresql-client-N) has a bin directory too, without
# initdb or pg_ctl.
pg_bin() {
  local initdb
  initdb=$(ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -1 || true)
  if [ -n "$initdb" ]; then dirname "$initdb"; fi
}

# as_pg CMD...: runs a Postgres program as the owner of the data directory
# (postgres when running as root: initdb refuses root), from / as postgres
# may not be allowed into the working directory.
as_pg() { if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi; }

# pg_alt: the name of this clone's data directory outside .run (pg_place),
# from the clone's path, so a copy of the clone with its .run/pg.dir does
# not share the original's server.
pg_alt() { printf 'euterpe-test-pg-%s' "$(printf %s "$RUN" | sha256sum | cut -c1-16)"; }

# pg_data: this clone's Postgres data directory, .run/pg unless .run/pg.dir
# names another (see pg_place).
pg_data() {
  local d
  d=$(cat "$RUN/pg.dir" 2>/dev/null || true)
  if [ -n "$d" ] && [ "$(basename "$d")" = "$(pg_alt)" ]; then echo "$d"; else echo "$RUN/pg"; fi
}

# pg_place: where a new cluster goes, .run/pg when its owner can reach it.
# As root the cluster belongs to postgres, which cannot reach a clone under
# a 0700 directory (root's home on Debian): the cluster then lives in the
# postgres user's home (or /var/tmp), named after this clone's path and
# recorded in .run/pg.dir.
pg_place() {
  local data=$RUN/pg home alt
  if [ "$(id -u)" != 0 ]; then mkdir -p "$data"; echo "$data"; return 0; fi
  mkdir -p "$data"; chown postgres "$data"
  if runuser -u postgres -- test -x "$data" 2>/dev/null; then echo "$data"; return 0; fi
  home=$(getent passwd postgres | cut -d: -f6)
  if [ -z "$home" ] || [ ! -d "$home" ] || [ -L "$home" ] || [ "$(stat -c %U "$home")" != postgres ]; then home=/var/tmp; fi
  alt=$home/$(pg_alt)
  if [ -L "$alt" ] || { [ -e "$alt" ] && [ "$(stat -c %U "$alt")" != postgres ]; }; then
    log "$alt exists and is not the postgres user's directory; remove it"; exit 1
  fi
  [ -d "$alt" ] || mkdir -m 0700 "$alt"
  chown postgres "$alt"; chmod 0700 "$alt"
  rmdir "$data"
  echo "$alt" >"$RUN/pg.dir"
  log "postgres cannot reach $RUN (a directory above it is closed to other users):"
  log "  its data goes to $alt (named in .run/pg.dir; delete it with the clone)"
  echo "$alt"
}

# pg_port DATA: the port of the postmaster running from DATA. Its pid file
# alone does not tell: a file left by a server that is gone may name a pid
# given to another program since (pg_ctl would signal that program).
pg_port() {
  local pid
  pid=$(sed -n 1p "$1/postmaster.pid" 2>/dev/null || true)
  if runs_in "$pid" "$1"; then sed -n 4p "$1/postmaster.pid"; fi
}

# pg_free_port PREFERRED: a free port whose socket in /tmp is free too:
# network namespaces (containers) sharing /tmp have ports of their own but
# not sockets of their own.
pg_free_port() {
  local p=$1
  while [ "$p" -lt $(($1 + 1000)) ]; do
    p=$(free_port "$p") || return 1
    if [ ! -e "/tmp/.s.PGSQL.$p.lock" ]; then echo "$p"; return 0; fi
    p=$((p + 1))
  done
  echo "no free port in $1..$(($1 + 999))" >&2
  return 1
}

# Postgres is private too (an initdb of a few seconds on a fresh clone):
# tests only ever create and drop their own euterpe_t_* databases, but a
# server the user did not name is not theirs to fill.
pg_up() {
  local data bin port
  if named EUTERPE_TEST_POSTGRES_URL "$RUN/pg.url"; then
    log "tests use the named EUTERPE_TEST_POSTGRES_URL"
    exp EUTERPE_TEST_POSTGRES_URL "$EUTERPE_TEST_POSTGRES_URL"; return 0
  fi
  bin=$(pg_bin)
  if [ -z "$bin" ]; then
    if [ "$(id -u)" != 0 ]; then
      log "missing the Postgres server (initdb); install it with: sudo apt-get update && sudo apt-get install -y postgresql"
      exit 1
    fi
    apt_install postgresql; bin=$(pg_bin)
  fi
  data=$(pg_data)
  port=$(pg_port "$data")
  if [ -z "$port" ]; then
    if [ ! -f "$data/PG_VERSION" ]; then
      data=$(pg_place)
      log "initialising private postgres in $data"
      as_pg "$bin/initdb" -D "$data" -U postgres --auth=trust >/dev/null
    fi
    # Not running (pg_port): a pid file left behind would make the server
    # refuse to start if its pid has been reused.
    rm -f "$data/postmaster.pid"
    lock_ports
    port=$(pg_free_port 5440)
    log "starting private postgres on 127.0.0.1:$port, data in $data"
    # The socket's name holds the port, so clones never share one in /tmp.
    as_pg "$bin/pg_ctl" -D "$data" -l "$data/log" -w -o "-p $port -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >/dev/null 8>&-
    unlock_ports
  fi
  echo "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable" >"$RUN/pg.url"
  exp EUTERPE_TEST_POSTGRES_URL "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"
}

# The programs `make run` calls: ffmpeg (the demo's tone and central's
# transcodes), curl, and ss and flock for the port checks.
run_tools_up() {
  need_pkg ffmpeg ffmpeg
  need_pkg curl curl
  need_pkg ss iproute2
  need_pkg flock util-linux
}

# The consoles' browser tests (console/browsertest) drive headless Chromium:
# EUTERPE_CHROMIUM, else chromium (Debian) or chromium-browser (Ubuntu,
# which has no chromium package). Only those tests need it, so where none
# can be had (Ubuntu's chromium-browser is a snap, which does not install
# in a container) they are skipped, with this warning, and everything else
# runs; under CI=true a missing browser stops here, as the tests would fail.
chromium_up() {
  if [ -n "${EUTERPE_CHROMIUM:-}" ]; then
    if [ -e "$EUTERPE_CHROMIUM" ]; then return 0; fi
    log "EUTERPE_CHROMIUM=$EUTERPE_CHROMIUM does not exist"; exit 1
  fi
  if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then return 0; fi
  if [ "$(id -u)" = 0 ] && { apt_install chromium || apt_install chromium-browser; }; then return 0; fi
  log "no chromium: install it (sudo apt-get update && sudo apt-get install -y chromium; chromium-browser"
  log "  on Ubuntu), or name a browser with EUTERPE_CHROMIUM"
  if [ "${CI:-}" = true ]; then exit 1; fi
  log "  the consoles' browser tests will be skipped"
}

# Everything tests call, `make run`'s programs included.
tools_up() {
  run_tools_up
  need_pkg b3sum b3sum
  # independent checks of the webhook signature and the README's receiver snippets
  need_pkg python3 python3
  need_pkg node nodejs
  need_pkg openssl openssl
  command -v gcc >/dev/null 2>&1 || need_pkg gcc gcc   # the race detector needs cgo
  # the units' tests and packaging/check run systemd-analyze verify
  need_pkg systemd-analyze systemd
  chromium_up
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
      nohup "$bin" --port "127.0.0.1:$port" posix "$dir/data" >"$dir/log" 2>&1 8>&- &
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
    run-tools) run_tools_up ;;
    *) log "unknown service $what"; exit 2 ;;
  esac
  # Merge with what an earlier call found, newest wins; the file may hold
  # named URLs with passwords, so it is the user's alone.
  umask 077
  touch "$ENVF"
  chmod 0600 "$ENVF"
  case $what in # a Redis 6.0 found earlier but not now must not linger
    all|redis6) grep -v EUTERPE_TEST_REDIS6_URL "$ENVF" >"$ENVF.old" || true; mv "$ENVF.old" "$ENVF" ;;
  esac
  cat "$ENVF" "$tmp" | awk -F'[ =]' '{v[$2]=$0} END {for (k in v) print v[k]}' | sort >"$ENVF.new"
  mv "$ENVF.new" "$ENVF"; rm -f "$tmp"
  # Passwords in named URLs stay out of the terminal.
  sed -e 's#://\([^/@:]*\):[^/@]*@#://\1:[REDACTED]@#' -e 's#\(SECRET_KEY=\).*#\1[REDACTED]#' "$ENVF" >&2
}

# stop_redis DIR CLI: stops this clone's Redis with its data in DIR, with
# SHUTDOWN NOSAVE on the port where it answers from DIR, else with SIGTERM
# to its pid file's process if that still runs in DIR.
stop_redis() {
  local dir=$1 cli=$2 port pid
  port=$(cat "$dir/port" 2>/dev/null || true)
  pid=$(cat "$dir/redis.pid" 2>/dev/null || true)
  if [ -n "$port" ] && [ "$(redis_dir "$cli" "$port")" = "$(readlink -f "$dir")" ]; then
    timeout 5 "$cli" -h 127.0.0.1 -p "$port" shutdown nosave >/dev/null 2>&1 || true
  elif runs_in "$pid" "$dir"; then
    kill "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/redis.pid" "$dir/port"
}

down() {
  local cli pid data bin
  cli=$(command -v redis-cli || echo "$RUN/redis6/redis-6.0.16/src/redis-cli")
  stop_redis "$RUN/redis" "$cli"
  stop_redis "$RUN/redis6" "$cli"
  pid=$(cat "$RUN/s3/pid" 2>/dev/null || true)
  if has_arg "$pid" "$RUN/s3/data"; then kill "$pid" 2>/dev/null || true; fi
  rm -f "$RUN/s3/pid"
  data=$(pg_data) bin=$(pg_bin)
  if [ -n "$bin" ] && [ -n "$(pg_port "$data")" ]; then
    as_pg "$bin/pg_ctl" -D "$data" stop -m fast || true
  fi
  rm -f "$ENVF" "$RUN/s3/port"
}

case ${1:-up} in
  up) shift || true; up "${1:-all}" ;;
  down) down ;;
  *) echo "usage: $0 up [all|redis|redis6|postgres|s3|tools|run-tools] | down" >&2; exit 2 ;;
esac
