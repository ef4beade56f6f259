#!/bin/sh
# Prints the Debian package version for the checked-out commit, from
# `git describe`:
#   v1.4.0                      → 1.4.0
#   v1.4.0-3-gabc1234           → 1.4.0+git3.gabc1234
#   v1.5.0-rc1                  → 1.5.0~rc1        (sorts before 1.5.0)
#   no tag yet (abc1234, 26 commits) → 0.0.0+git26.gabc1234
#   any of them -dirty          → …+dirty / ….dirty
# The commit count after "+git" keeps snapshot versions in upgrade order;
# only characters Debian allows in an upstream version are used (no "-").
# DESCRIBE and COUNT override git for tests.
set -eu
describe=${DESCRIBE-$(git describe --tags --long --dirty --match 'v[0-9]*' 2>/dev/null || true)}
dirty=
case "$describe" in *-dirty) dirty=1; describe=${describe%-dirty} ;; esac
if [ -z "$describe" ]; then
	count=${COUNT-$(git rev-list --count HEAD)}
	hash=${HASH-$(git rev-parse --short HEAD)}
	if [ -z "${DESCRIBE+x}" ] && ! git diff --quiet HEAD 2>/dev/null; then dirty=1; fi
	v="0.0.0+git$count.g$hash"
else
	hash=${describe##*-g}
	rest=${describe%-g*}
	n=${rest##*-}
	tag=${rest%-*}
	v=$(printf '%s' "${tag#v}" | tr '-' '~')
	if [ "$n" != 0 ]; then v="$v+git$n.g$hash"; fi
fi
if [ -n "$dirty" ]; then
	case "$v" in *+*) v="$v.dirty" ;; *) v="$v+dirty" ;; esac
fi
case "$v" in
[0-9]*) ;;
*) echo "debversion: cannot make a Debian version of '$describe'" >&2; exit 1 ;;
esac
printf '%s\n' "$v"
