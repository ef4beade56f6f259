package daemon_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
)

// signalsEnv makes the test binary a daemon whose stop hangs, for
// TestSecondSignalEndsAHungStop.
const signalsEnv = "EUTERPE_TEST_SIGNALS_DAEMON"

// stopOnSignal begins a stop on SignalContext's signal and then hangs, as
// a stop waiting on work that does not end.
func stopOnSignal() int {
	ctx, stop := daemon.SignalContext(context.Background())
	defer stop()
	fmt.Println("ready")
	<-ctx.Done()
	fmt.Println("stopping")
	time.Sleep(time.Minute)
	return 0
}

// signalsChild is the test binary run as stopOnSignal, its output lines
// and a channel closed when it has exited.
type signalsChild struct {
	cmd    *exec.Cmd
	lines  chan string
	exited chan struct{}
}

// startSignalsChild starts stopOnSignal; under nohup it starts with SIGHUP
// ignored, as nohup starts a program.
func startSignalsChild(t *testing.T, nohup bool) *signalsChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if nohup {
		cmd = exec.Command("/bin/sh", "-c", `trap "" HUP; exec "$0" "$@"`, os.Args[0], "-test.run=^$")
	}
	cmd.Env = append(os.Environ(), signalsEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &signalsChild{cmd: cmd, lines: make(chan string, 4), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		_ = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.exited
	})
	return c
}

func (c *signalsChild) expect(t *testing.T, want string) {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		if !ok || l != want {
			t.Fatalf("got %q (open %v), want %q", l, ok, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no %q", want)
	}
}

func (c *signalsChild) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// quiet checks the child neither printed nor exited for a while.
func (c *signalsChild) quiet(t *testing.T, after string) {
	t.Helper()
	select {
	case l := <-c.lines:
		t.Fatalf("%s: printed %q", after, l)
	case <-c.exited:
		t.Fatalf("%s: exited (%v)", after, c.cmd.ProcessState)
	case <-time.After(500 * time.Millisecond):
	}
}

// A daemon started under nohup keeps ignoring SIGHUP, and SIGTERM still
// stops it; a hang-up during a stop begun by one is ignored too, since a
// closing terminal often sends two.
func TestHangUpUnderNohupAndDuringAStop(t *testing.T) {
	t.Run("nohup", func(t *testing.T) {
		c := startSignalsChild(t, true)
		c.expect(t, "ready")
		c.signal(t, syscall.SIGHUP)
		c.quiet(t, "SIGHUP under nohup")
		c.signal(t, syscall.SIGTERM)
		c.expect(t, "stopping")
	})
	t.Run("second hang-up", func(t *testing.T) {
		c := startSignalsChild(t, false)
		c.expect(t, "ready")
		c.signal(t, syscall.SIGHUP)
		c.expect(t, "stopping")
		c.signal(t, syscall.SIGHUP)
		c.quiet(t, "a second SIGHUP")
	})
}

// The first SIGTERM, SIGINT or SIGHUP begins a graceful stop; once it has
// begun, another signal kills the process (its default action) instead of
// being swallowed while the stop hangs.
func TestSecondSignalEndsAHungStop(t *testing.T) {
	for _, tt := range []struct {
		name          string
		first, second syscall.Signal
	}{
		{"term twice", syscall.SIGTERM, syscall.SIGTERM},
		{"interrupt twice", syscall.SIGINT, syscall.SIGINT},
		{"hang-up, then interrupt", syscall.SIGHUP, syscall.SIGINT},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := startSignalsChild(t, false)
			c.expect(t, "ready")
			c.signal(t, tt.first)
			c.expect(t, "stopping")
			// The handler is let go just after the stop began: signals
			// sent before it is may still be caught, so keep sending.
			deadline := time.After(5 * time.Second)
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				_ = c.cmd.Process.Signal(tt.second)
				select {
				case <-c.exited:
					ws, _ := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
					if !ws.Signaled() || ws.Signal() != tt.second {
						t.Fatalf("exited with %v, want killed by %v", c.cmd.ProcessState, tt.second)
					}
					return
				case <-deadline:
					t.Fatalf("%v during the stop did not end the process", tt.second)
				case <-tick.C:
				}
			}
		})
	}
}
