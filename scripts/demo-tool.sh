#!/bin/sh
# A stand-in `tool` backend for `make run`: the exec backend contract is
# payload JSON on stdin, result JSON on stdout.
payload=$(cat)
printf '{"echo":%s,"handled_by":"%s","at":"%s"}\n' "$payload" "$(hostname)" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
