package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
)

// euterpe-central.service is what the package installs: Type=notify with a
// watchdog (TestServeSpeaksSdNotify proves the daemon's side), its own
// state directory and user (not the edge's: a child of one daemon must not
// read the other's secrets), SIGTERM to the daemon alone (it stops its
// ffmpeg and stages itself and hands their jobs back), secrets through LoadCredential=, hardened like
// the edge unit, and accepted by systemd-analyze verify.
func TestSystemdUnitVerifies(t *testing.T) {
	unit, err := os.ReadFile("../../systemd/euterpe-central.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Type=notify", "WatchdogSec=", "Restart=on-failure", "RestartPreventExitStatus=2", "After=network-online.target",
		"ExecStart=/usr/bin/euterpe-central serve", "EnvironmentFile=-/etc/euterpe/central.env",
		"LoadCredential=euterpe:/etc/euterpe/central.credentials", "StateDirectory=euterpe-central", "User=euterpe-central\n", "KillMode=mixed\n",
		"ProtectSystem=strict", "NoNewPrivileges=yes", "PrivateTmp=yes", "CapabilityBoundingSet=\n", "SystemCallFilter=@system-service"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("unit lacks %q", want)
		}
	}
	if strings.Contains(string(unit), "EUTERPE_KEYRING=") || strings.Contains(string(unit), "EUTERPE_DATABASE_URL=") {
		t.Error("secrets belong in credentials, not in the unit's environment")
	}
	tool, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("systemd-analyze not installed (apt-get install systemd)")
		}
		t.Skip("systemd-analyze not installed")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "euterpe-central.service")
	if err := os.WriteFile(path, bytes.ReplaceAll(unit, []byte("/usr/bin/euterpe-central"), []byte(self)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tool, "verify", path).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// Outside systemd central keeps its database and key where its unit's
// StateDirectory= would, not in the edge's /var/lib/euterpe: an edge and a
// central started by hand on one machine must not share central.db.
func TestDefaultStateDirIsTheUnits(t *testing.T) {
	t.Setenv("STATE_DIRECTORY", "")
	app := serve.NewApp()
	register(app)
	cfg := daemon.NewConfig("euterpe-central", func(string) string { return "" })
	var s serve.Settings
	app.Bind(cfg, &s)
	for _, st := range cfg.Settings() {
		if st.Env == "EUTERPE_STATE_DIR" {
			if st.Default != "/var/lib/euterpe-central" {
				t.Fatalf("EUTERPE_STATE_DIR defaults to %q, want the unit's /var/lib/euterpe-central", st.Default)
			}
			return
		}
	}
	t.Fatal("no EUTERPE_STATE_DIR setting")
}

// The example environment file, shipped as the package's conffile
// /etc/euterpe/central.env, shows real settings with their real defaults.
func TestEnvExampleMatchesSettings(t *testing.T) {
	t.Setenv("TMPDIR", "") // defaults under os.TempDir() are documented under /tmp
	text, err := os.ReadFile("../../systemd/central.env.example")
	if err != nil {
		t.Fatal(err)
	}
	app := serve.NewApp()
	register(app)
	cfg := daemon.NewConfig("euterpe-central", func(string) string { return "" })
	var s serve.Settings
	app.Bind(cfg, &s)
	if err := daemon.CheckEnvExample(string(text), cfg.Settings()); err != nil {
		t.Fatal(err)
	}
}

// The comment above EUTERPE_CENTRAL_ROLES in the example environment file
// tells the operator what an empty value runs: every default role must be
// named there, or a host meant to run only some roles is split by a list
// that leaves others running.
func TestEnvExampleNamesDefaultRoles(t *testing.T) {
	text, err := os.ReadFile("../../systemd/central.env.example")
	if err != nil {
		t.Fatal(err)
	}
	app := serve.NewApp()
	register(app)
	var comment []string
	found := false
	for _, line := range strings.Split(string(text), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#EUTERPE_CENTRAL_ROLES=") {
			found = true
			break
		}
		if strings.HasPrefix(line, "#") && !strings.HasPrefix(line, "#EUTERPE_") {
			comment = append(comment, line)
			continue
		}
		comment = nil
	}
	if !found || len(comment) == 0 {
		t.Fatal("central.env.example has no commented #EUTERPE_CENTRAL_ROLES= line with a comment above it")
	}
	words := map[string]bool{}
	for _, w := range strings.FieldsFunc(strings.Join(comment, " "), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r == '_')
	}) {
		words[w] = true
	}
	for _, role := range app.Enabled(serve.Settings{}) {
		if !words[role] {
			t.Errorf("the comment above #EUTERPE_CENTRAL_ROLES= does not name the default role %q:\n%s", role, strings.Join(comment, "\n"))
		}
	}
}

// systemd kills the daemon at TimeoutStopSec: it must leave in-flight
// requests their default grace, and runners the time to hand their jobs
// back and then remove what they staged (up to 40 s, which runs alongside).
func TestUnitStopTimeoutCoversShutdownGrace(t *testing.T) {
	unit, err := os.ReadFile("../../systemd/euterpe-central.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^TimeoutStopSec=(\S+)$`).FindSubmatch(unit)
	if m == nil {
		t.Fatal("the unit sets no TimeoutStopSec")
	}
	stop, err := time.ParseDuration(string(m[1]))
	if err != nil {
		t.Fatalf("TimeoutStopSec=%s: %v", m[1], err)
	}
	app := serve.NewApp()
	register(app)
	cfg := daemon.NewConfig("euterpe-central", func(string) string { return "" })
	var s serve.Settings
	app.Bind(cfg, &s)
	if err := cfg.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if floor := max(s.ShutdownGrace, 40*time.Second); stop <= floor {
		t.Errorf("TimeoutStopSec=%s, want above %s (EUTERPE_SHUTDOWN_GRACE=%s)", m[1], floor, s.ShutdownGrace)
	}
}
