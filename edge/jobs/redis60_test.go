package jobs_test

import (
	"slices"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// The Lua scripts (create, transition, acknowledge) call only Redis 6.0
// commands with 6.0 options; a command name that is not a literal fails
// the scan, so nothing escapes it.
func TestScriptsUseRedis60Commands(t *testing.T) {
	found := testsvc.CheckLuaRedis60(t, ".")
	for _, want := range []string{"GET", "SET", "HSET", "HGET", "EXPIRE", "XADD", "XACK", "XDEL", "PUBLISH"} {
		if !slices.Contains(found, want) {
			t.Errorf("scan found %v, missing %s", found, want)
		}
	}
}
