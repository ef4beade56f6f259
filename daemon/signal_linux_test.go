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
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), signalsEnv+"=1")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			lines := make(chan string, 4)
			go func() {
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
				_ = cmd.Wait()
				close(exited)
			}()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-exited
			})
			expect := func(want string) {
				t.Helper()
				select {
				case l, ok := <-lines:
					if !ok || l != want {
						t.Fatalf("got %q (open %v), want %q", l, ok, want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("no %q", want)
				}
			}
			expect("ready")
			if err := cmd.Process.Signal(tt.first); err != nil {
				t.Fatal(err)
			}
			expect("stopping")
			// The handler is let go just after the stop began: signals
			// sent before it is may still be caught, so keep sending.
			deadline := time.After(5 * time.Second)
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				_ = cmd.Process.Signal(tt.second)
				select {
				case <-exited:
					ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
					if !ws.Signaled() || ws.Signal() != tt.second {
						t.Fatalf("exited with %v, want killed by %v", cmd.ProcessState, tt.second)
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
