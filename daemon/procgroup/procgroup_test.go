package procgroup_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/procgroup"
	"github.com/vesta-cx/euterpe/daemon/procgroup/proctest"
)

// parentEnv makes the test binary the daemon of TestDaemonKilledKillsProgram:
// it starts a contained program, records its pid and waits to be killed.
const parentEnv = "EUTERPE_PROCGROUP_PARENT_PIDFILE"

func TestMain(m *testing.M) {
	if pidFile := os.Getenv(parentEnv); pidFile != "" {
		cmd := exec.CommandContext(context.Background(), "sleep", "600")
		procgroup.Contain(cmd)
		if err := cmd.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		writePid(pidFile, cmd.Process.Pid)
		_ = cmd.Wait()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func writePid(pidFile string, pid int) {
	if err := os.WriteFile(pidFile+".tmp", []byte(strconv.Itoa(pid)), 0o600); err == nil {
		_ = os.Rename(pidFile+".tmp", pidFile)
	}
}

// wrapper writes a script that starts a long-running child of its own,
// records the child's pid and then does what tail says.
func wrapper(t *testing.T, tail string) (program, pidFile string) {
	t.Helper()
	dir := t.TempDir()
	program, pidFile = filepath.Join(dir, "wrapper"), filepath.Join(dir, "pid")
	script := "#!/bin/sh\nsleep 600 &\necho $! > " + pidFile + ".tmp\nmv " + pidFile + ".tmp " + pidFile + "\n" + tail + "\n"
	if err := os.WriteFile(program, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return program, pidFile
}

// TestNothingOutlivesTheProgram: whether the program is cancelled or exits
// on its own, leaving a child behind that holds its output open, Run
// returns at once and the child is gone.
func TestNothingOutlivesTheProgram(t *testing.T) {
	cases := []struct {
		name   string
		tail   string // what the program does after starting its child
		cancel bool
	}{
		{"cancelled while waiting for its child", "wait", true},
		{"exits leaving its child", "exit 0", false},
		{"fails leaving its child", "exit 3", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			program, pidFile := wrapper(t, tc.tail)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cmd := exec.CommandContext(ctx, program)
			var out strings.Builder
			cmd.Stdout = &out // a pipe the child inherits
			cmd.WaitDelay = time.Minute
			procgroup.Contain(cmd)
			done := make(chan error, 1)
			go func() { done <- procgroup.Run(cmd) }()
			child := proctest.ReadPid(t, pidFile)
			if tc.cancel {
				cancel()
			}
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Run waited for the program's child")
			}
			proctest.RequireGone(t, "the program's child", child, 5*time.Second)
		})
	}
}

// TestDaemonKilledKillsProgram: a daemon killed with SIGKILL, which runs no
// cleanup of its own, leaves no contained program running.
func TestDaemonKilledKillsProgram(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	parent := exec.Command(os.Args[0], "-test.run", "^$")
	parent.Env = append(os.Environ(), parentEnv+"="+pidFile)
	parent.Stderr = os.Stderr
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	program := proctest.ReadPid(t, pidFile)
	if !proctest.Running(program) {
		t.Fatal("the program is not running before the kill")
	}
	if err := parent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	proctest.RequireGone(t, "the dead daemon's program", program, 5*time.Second)
}
