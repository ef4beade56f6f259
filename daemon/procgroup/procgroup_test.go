package procgroup_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
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

// TestOtherGoroutinesEndingThreads: the kernel sends the death signal when
// the thread that started the program ends, not the daemon. Go ends a
// thread whenever a goroutine that locked it returns without unlocking
// (any library may do that), so, were the starting thread free to run
// other goroutines while the program runs, one of them could end it and
// the kernel would kill a healthy program — a SIGKILL nobody sent.
func TestOtherGoroutinesEndingThreads(t *testing.T) {
	stop := make(chan struct{})
	ended := make(chan struct{})
	go func() { // ends one thread after another until stopped
		defer close(ended)
		for {
			select {
			case <-stop:
				return
			default:
			}
			locked := make(chan struct{})
			go func() {
				runtime.LockOSThread()
				close(locked)
			}()
			<-locked
		}
	}()
	defer func() {
		close(stop)
		<-ended
	}()
	const programs, together = 100, 10
	errs := make(chan error, programs)
	for i := 0; i < programs; i += together {
		var wg sync.WaitGroup
		for range together {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := exec.CommandContext(context.Background(), "sleep", "0.05")
				procgroup.Contain(cmd)
				errs <- procgroup.Run(cmd)
			}()
		}
		wg.Wait()
	}
	close(errs)
	killed := 0
	for err := range errs {
		if err != nil {
			killed++
			t.Log(err)
		}
	}
	if killed > 0 {
		t.Fatalf("%d of %d programs were killed while they ran", killed, programs)
	}
}

// TestLateCancelKillsNoOne: cancelling the context while the program exits
// can have exec call Cancel only after Wait reaped the program, when its
// pid — the group's id — is free for another process. That late Cancel
// must kill no one. (Root only: the test puts a process at the freed pid
// through ns_last_pid.)
func TestLateCancelKillsNoOne(t *testing.T) {
	cmd := exec.CommandContext(context.Background(), "true")
	procgroup.Contain(cmd)
	if err := procgroup.Run(cmd); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	var other *exec.Cmd
	for range 50 {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			t.Skipf("cannot choose the next pid: %v", err)
		}
		c := exec.Command("sleep", "600")
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		if c.Process.Pid == pid {
			other = c
			break
		}
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	if other == nil {
		t.Skip("another process took the freed pid first")
	}
	exited := make(chan struct{})
	go func() {
		_ = other.Wait()
		close(exited)
	}()
	defer func() {
		_ = other.Process.Kill()
		<-exited
	}()
	_ = cmd.Cancel() // what exec's context watcher does, late
	select {
	case <-exited:
		t.Fatalf("a late Cancel killed pid %d, an unrelated process that took the program's pid", pid)
	case <-time.After(500 * time.Millisecond):
	}
}
