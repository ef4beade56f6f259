package daemon_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/procgroup"
)

// daemonEnv makes the test binary the daemon of TestChildCannotReadSecrets:
// it starts as a daemon does and runs a program that tries to read the
// daemon's environment. The go test process itself is never made
// non-dumpable.
const daemonEnv = "EUTERPE_TEST_DUMPABLE_DAEMON"

// nobody is the unprivileged user the daemon runs as when the tests run
// as root, whose programs could otherwise read any process
// (CAP_SYS_PTRACE): a deployed daemon runs as a user of its own.
const nobody = 65534

// peek is the program: it checks it can read its own environment (execve
// made it dumpable again), then prints its parent's.
const peek = `cat /proc/self/environ >/dev/null || echo "program not dumpable"; exec cat /proc/$PPID/environ`

func TestMain(m *testing.M) {
	if os.Getenv(daemonEnv) != "" {
		os.Exit(actAsDaemon())
	}
	if os.Getenv(signalsEnv) != "" {
		os.Exit(stopOnSignal())
	}
	os.Exit(m.Run())
}

// actAsDaemon is what the daemons' main does, up to starting a program.
func actAsDaemon() int {
	if err := daemon.HideFromChildren(); err != nil {
		fmt.Fprintln(os.Stderr, "hide:", err)
		return 10
	}
	cfg := daemon.NewConfig("test", os.Getenv)
	var dumpable bool
	daemon.DeclareDumpable(cfg, &dumpable)
	if err := cfg.Parse(nil); err != nil {
		fmt.Fprintln(os.Stderr, "settings:", err)
		return 11
	}
	if err := daemon.ApplyDumpable(slog.New(slog.DiscardHandler), dumpable); err != nil {
		fmt.Fprintln(os.Stderr, "apply:", err)
		return 12
	}
	// The daemon's own /metrics still reads what it needs of /proc/self.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{ReportErrors: true}))
	if _, err := reg.Gather(); err != nil {
		fmt.Fprintln(os.Stderr, "process metrics:", err)
		return 13
	}
	cmd := exec.CommandContext(context.Background(), "/bin/sh", "-c", peek)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	procgroup.Contain(cmd)
	if err := procgroup.Run(cmd); err != nil {
		fmt.Fprintln(os.Stderr, "program:", err)
	}
	return 0
}

// daemonBinary is the test binary, copied where nobody can run it when
// the tests run as root (go test keeps it in a directory of mode 0700).
func daemonBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		return self
	}
	dir, err := os.MkdirTemp("", "euterpe-dumpable-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	path := filepath.Join(dir, "daemon.test")
	out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestChildCannotReadSecrets: a program the daemon runs as its own user
// (ffmpeg on hostile media, say) cannot read the secrets in the daemon's
// environment, unless the operator asked for a dumpable daemon.
func TestChildCannotReadSecrets(t *testing.T) {
	bin := daemonBinary(t)
	cases := []struct {
		name     string
		env      []string
		readable bool
	}{
		{"by default", nil, false},
		{"dumpable false", []string{daemon.EnvDumpable + "=false"}, false},
		{"dumpable on request", []string{daemon.EnvDumpable + "=true"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, 16)
			_, _ = rand.Read(b)
			secret := "s3cret-" + hex.EncodeToString(b)
			cmd := exec.Command(bin, "-test.run", "^$")
			cmd.Env = append([]string{daemonEnv + "=1", "EUTERPE_SYNC_SECRET=" + secret}, tc.env...)
			cmd.Dir = filepath.Dir(bin)
			if os.Geteuid() == 0 {
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
			}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("daemon: %v\n%s", err, stderr.String())
			}
			if strings.Contains(stdout.String(), "program not dumpable") {
				t.Fatal("the program could not read its own environment")
			}
			read := strings.Contains(stdout.String(), secret)
			if read != tc.readable {
				t.Fatalf("program read the daemon's secret: %v, want %v\nstderr: %s", read, tc.readable, stderr.String())
			}
			if !tc.readable && !strings.Contains(stderr.String(), "Permission denied") {
				t.Fatalf("the program was not refused for want of permission: %s", stderr.String())
			}
		})
	}
}
