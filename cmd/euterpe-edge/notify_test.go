package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// serveChildEnv selects the `euterpe-edge serve` role of the test binary:
// the process then runs the daemon with its real environment and exits
// with serve's status.
const serveChildEnv = "EUTERPE_EDGE_TEST_SERVE"

func TestMain(m *testing.M) {
	if os.Getenv(serveChildEnv) == "1" {
		os.Exit(run(context.Background(), []string{"serve"}, os.Stdout, os.Stderr, os.Getenv))
	}
	os.Exit(m.Run())
}

// notification is one sd_notify datagram and when it arrived.
type notification struct {
	state string
	at    time.Time
}

// Under systemd (Type=notify, WatchdogSec) the daemon says READY=1 once it
// serves, feeds the watchdog at a third of WATCHDOG_USEC while Redis
// answers, and on a real SIGTERM says STOPPING=1 and exits 0 within the
// shutdown grace. WATCHDOG_PID is left unset: go-systemd then accepts the
// watchdog for any process (with it set, only for that pid).
func TestServeSpeaksSdNotify(t *testing.T) {
	_, opt := testsvc.Redis(t)
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	notes := make(chan notification, 256)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(notes)
				return
			}
			for _, line := range strings.Split(strings.TrimSpace(string(buf[:n])), "\n") {
				notes <- notification{state: line, at: time.Now()}
			}
		}
	}()

	const grace = 3 * time.Second
	// Pinged every second. Pinging only every period, or never, shows as
	// a gap of the period or more; a busy machine's stalls stay well
	// short of it.
	const watchdogPeriod = 3 * time.Second
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "EUTERPE_") && !strings.HasPrefix(k, "WATCHDOG_") && k != "NOTIFY_SOCKET" && k != "LISTEN_FDS" {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env,
		serveChildEnv+"=1",
		"NOTIFY_SOCKET="+sock,
		"WATCHDOG_USEC="+strconv.FormatInt(watchdogPeriod.Microseconds(), 10),
		"EUTERPE_REDIS_URL="+redisURLFor(opt),
		"EUTERPE_EDGE_ADDR="+freeAddr(t),
		"EUTERPE_STATE_DIR="+t.TempDir(),
		"EUTERPE_SHUTDOWN_GRACE="+grace.String(),
		"EUTERPE_WORKER_DRAIN=1s",
		"EUTERPE_LOG_LEVEL=warn",
	)
	var logs testsvc.LogBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{}) // closed when the child has exited, with waitErr set
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})

	next := func(want string, within time.Duration) notification {
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
			case <-exited:
				t.Fatalf("daemon exited (%v) before %s; log:\n%s", waitErr, want, logs.String())
			case <-deadline:
				t.Fatalf("no %s within %v; log:\n%s", want, within, logs.String())
			}
		}
	}
	ready := next("READY=1", 15*time.Second)
	// systemd kills a service that does not ping within WATCHDOG_USEC;
	// pings at a third of it leave room for a loaded machine.
	first := next("WATCHDOG=1", 2*watchdogPeriod)
	if d := first.at.Sub(ready.at); d >= watchdogPeriod {
		t.Errorf("first WATCHDOG=1 %v after READY=1, want within WATCHDOG_USEC (%v)", d, watchdogPeriod)
	}
	second := next("WATCHDOG=1", 2*watchdogPeriod)
	if d := second.at.Sub(first.at); d >= watchdogPeriod {
		t.Errorf("watchdog pings %v apart, beyond WATCHDOG_USEC (%v)", d, watchdogPeriod)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	next("STOPPING=1", grace)
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("daemon exited with %v after SIGTERM; log:\n%s", waitErr, logs.String())
		}
	case <-time.After(grace + time.Second):
		t.Fatalf("daemon still running %v after SIGTERM; log:\n%s", grace+time.Second, logs.String())
	}
}
