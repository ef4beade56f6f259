#!/usr/bin/env bash
# Regenerates the settings tables in README.md from the programs themselves
# (`euterpe-edge help serve`, `euterpe-central help`), between the markers
# <!-- settings:edge --> … <!-- /settings:edge --> and likewise for central.
#   scripts/settings-table.sh          rewrite README.md
#   scripts/settings-table.sh --check  fail if README.md is out of date (make lint)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-write}

table() { # reads "  -flag  (ENV, default "x")\n      usage" pairs
  echo "| environment | flag | default | meaning |"
  echo "|---|---|---|---|"
  awk '
    /^  -[a-z0-9-]+  \(/ {
      flag=$1
      env=$0; sub(/.*\(/, "", env); sub(/,.*/, "", env)
      def=$0; sub(/.*default "/, "", def); sub(/"\)$/, "", def)
      getline usage; sub(/^ +/, "", usage); gsub(/\|/, "\\|", usage)
      if (def == "") def = " "; else def = "`" def "`"
      printf "| `%s` | `%s` | %s | %s |\n", env, flag, def, usage
    }'
}

# Defaults under os.TempDir() name /tmp, as they are documented, whatever
# TMPDIR the machine running this sets.
edge=$(TMPDIR= go run ./cmd/euterpe-edge help serve 2>&1 | table)
central=$(TMPDIR= go run ./cmd/euterpe-central help 2>&1 | table)

render() {
  # Through the environment, not -v: awk would read the tables' \| as escapes.
  EDGE_TABLE="$edge" CENTRAL_TABLE="$central" awk '
    /<!-- settings:edge -->/    { print; print ENVIRON["EDGE_TABLE"]; skip=1; next }
    /<!-- settings:central -->/ { print; print ENVIRON["CENTRAL_TABLE"]; skip=1; next }
    /<!-- \/settings:(edge|central) -->/ { skip=0 }
    !skip { print }' README.md
}

new=$(render)
if [ "$mode" = --check ]; then
  if [ "$new" != "$(cat README.md)" ]; then
    echo "README.md settings tables are out of date: run scripts/settings-table.sh" >&2
    exit 1
  fi
  exit 0
fi
printf '%s\n' "$new" > README.md
