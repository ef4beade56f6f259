package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
)

// euterpe-central.service is what the package installs: Type=notify with a
// watchdog (TestServeSpeaksSdNotify proves the daemon's side), its own
// state directory and user, secrets through LoadCredential=, hardened like
// the edge unit, and accepted by systemd-analyze verify.
func TestSystemdUnitVerifies(t *testing.T) {
	unit, err := os.ReadFile("../../systemd/euterpe-central.service")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Type=notify", "WatchdogSec=", "Restart=on-failure", "After=network-online.target",
		"ExecStart=/usr/bin/euterpe-central serve", "EnvironmentFile=-/etc/euterpe/central.env",
		"LoadCredential=euterpe:/etc/euterpe/central.credentials", "StateDirectory=euterpe-central", "User=euterpe",
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

// The example environment file, shipped as the package's conffile
// /etc/euterpe/central.env, shows real settings with their real defaults.
func TestEnvExampleMatchesSettings(t *testing.T) {
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
