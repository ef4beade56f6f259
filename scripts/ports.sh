# Sourced by services.sh and run.sh: loopback ports for private services and
# daemons, chosen so that several clones (and several runs) on one machine
# never share one. A port is taken only while holding a machine-wide lock,
# and the caller keeps holding it until its process listens, so two clones
# cannot both pick the same free port in the gap between check and bind.

PORTS_LOCK=${EUTERPE_PORTS_LOCK:-${TMPDIR:-/tmp}/euterpe-ports.lock}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port PREFERRED: PREFERRED when nothing listens there, else the next
# port above it that is free.
free_port() {
  local p
  for ((p = $1; p < $1 + 1000; p++)); do
    port_open "$p" || { echo "$p"; return 0; }
  done
  echo "no free port in $1..$(($1 + 999))" >&2
  return 1
}

# lock_ports / unlock_ports bracket "choose a port, start the process, wait
# until it listens". The lock is released when the shell exits in any case;
# a process started meanwhile must not inherit it (start it with `8>&-`),
# or a daemon outliving a shell that never reached unlock_ports would hold
# it for as long as it runs and every later run would wait for ever.
lock_ports() {
  exec 8>>"$PORTS_LOCK"
  chmod a+rw "$PORTS_LOCK" 2>/dev/null || true
  flock -w 120 8 || {
    echo "port lock $PORTS_LOCK held for 120 s; open in: $(lock_holders)" >&2
    exit 1
  }
}
unlock_ports() { flock -u 8 2>/dev/null || true; exec 8>&-; }

# lock_holders: the processes with the port lock open, as "pid (name)",
# but for this script and its ancestors (what /proc shows this user).
lock_holders() (
  exec 8>&-
  lock=$(readlink -f "$PORTS_LOCK")
  ours=" " out="" p=$BASHPID
  while [ -n "$p" ] && [ "$p" -gt 1 ]; do
    ours+="$p "
    p=$(sed -n 's/^PPid:[[:space:]]*//p' "/proc/$p/status" 2>/dev/null)
  done
  for f in /proc/[0-9]*/fd/*; do
    [ "$(readlink "$f" 2>/dev/null)" = "$lock" ] || continue
    p=${f#/proc/}; p=${p%%/*}
    case $ours in *" $p "*) continue ;; esac
    out+="$p ($(cat "/proc/$p/comm" 2>/dev/null)) "
  done
  echo "${out:-no other process visible}"
)

# listens PID PORT: whether process PID (or one of its children) listens
# on PORT, so a port answering because another program took it is not
# mistaken for ours.
listens() {
  local pids
  pids=$(ss -Hltnp "sport = :$2" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2)
  for p in $pids; do
    [ "$p" = "$1" ] && return 0
    [ "$(ps -o ppid= -p "$p" 2>/dev/null | tr -d ' ')" = "$1" ] && return 0
  done
  return 1
}
