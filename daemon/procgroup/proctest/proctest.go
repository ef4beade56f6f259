// Package proctest holds what tests of contained programs (package
// procgroup) check processes with: whether a pid still runs, the pid a
// program recorded in a file, and that a process is gone in time.
package proctest

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Running reports whether pid is a live process; a zombie waiting for its
// (new) parent to reap it has ended.
func Running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "pid (comm) state …": comm may hold spaces and parentheses, the
	// state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// ReadPid waits up to 10 s for pidFile, written whole (by a rename), and
// returns the pid in it.
func ReadPid(t testing.TB, pidFile string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, err := os.ReadFile(pidFile); err == nil {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatalf("pid file %s: %v", pidFile, err)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid was recorded in %s", pidFile)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// RequireGone fails t unless pid ends within within; a survivor is
// killed so that it does not outlive the test.
func RequireGone(t testing.TB, what string, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for Running(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("%s (pid %d) is still running after %s", what, pid, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
