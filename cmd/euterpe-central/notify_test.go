package main

import (
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// note is one sd_notify datagram and when it arrived.
type note struct {
	state string
	at    time.Time
}

// notifySocket listens where a Type=notify unit's NOTIFY_SOCKET points and
// delivers each state line it receives.
func notifySocket(t *testing.T) (string, <-chan note) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	notes := make(chan note, 256)
	go func() {
		defer close(notes)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			for _, line := range strings.Split(strings.TrimSpace(string(buf[:n])), "\n") {
				select {
				case notes <- note{state: line, at: time.Now()}:
				default: // a test that stopped reading must not block the reader
				}
			}
		}
	}()
	return sock, notes
}

// Under systemd (Type=notify, WatchdogSec) euterpe-central says READY=1
// once its roles run, feeds the watchdog while the database answers, and
// on SIGTERM says STOPPING=1 and exits 0 — whatever roles the pod runs: a
// pod without the api role (runners only) must not be killed by systemd
// for never becoming ready.
func TestServeSpeaksSdNotify(t *testing.T) {
	// The daemon pings every third of WatchdogSec, its watchdog started
	// just before READY=1: the first ping comes a third of WatchdogSec
	// after READY=1, leaving two thirds of it to a slow machine before
	// the bound, WatchdogSec, that a first ping coming a WatchdogSec or
	// more late would miss.
	const watchdogPeriod = 3 * time.Second
	roleSets := []struct{ name, roles string }{
		{"api", "api,sweeper"},
		{"no api", "sweeper"},
	}
	for _, engine := range sqltest.Engines {
		for _, rs := range roleSets {
			t.Run(string(engine)+"/"+rs.name, func(t *testing.T) {
				f := newFixture(t, engine)
				sock, notes := notifySocket(t)
				c := startChild(t, []string{"EUTERPE_DATABASE_URL=" + f.url, "EUTERPE_KEYRING=" + f.keyring,
					"EUTERPE_CENTRAL_ROLES=" + rs.roles, "EUTERPE_STATE_DIR=" + t.TempDir(), "EUTERPE_SHUTDOWN_GRACE=2s",
					"NOTIFY_SOCKET=" + sock, "WATCHDOG_USEC=" + strconv.FormatInt(watchdogPeriod.Microseconds(), 10)}, "serve")
				next := func(want string, within time.Duration) note {
					t.Helper()
					deadline := time.After(within)
					for {
						select {
						case n, ok := <-notes:
							if !ok {
								t.Fatalf("notify socket closed waiting for %s", want)
							}
							if n.state == want {
								return n
							}
						case <-c.exited:
							t.Fatalf("euterpe-central exited before %s", want)
						case <-deadline:
							t.Fatalf("no %s within %v", want, within)
						}
					}
				}
				ready := next("READY=1", 20*time.Second)
				first := next("WATCHDOG=1", 2*watchdogPeriod)
				if d := first.at.Sub(ready.at); d > watchdogPeriod {
					t.Errorf("first WATCHDOG=1 %v after READY=1, want within WATCHDOG_USEC (%v)", d, watchdogPeriod)
				}
				next("WATCHDOG=1", 2*watchdogPeriod)
				if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
				next("STOPPING=1", 5*time.Second)
				waitFor(t, 10*time.Second, "exit after SIGTERM", c.done)
				if code := c.cmd.ProcessState.ExitCode(); code != 0 {
					t.Fatalf("exit %d after SIGTERM", code)
				}
			})
		}
	}
}
