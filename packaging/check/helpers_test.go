package check

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pkgSpec is what one package must hold, for either architecture.
type pkgSpec struct {
	name      string
	program   string            // /usr/bin/<program>
	unit      string            // systemd unit file name
	envFile   string            // conffile with the commented defaults
	conffiles []string          // every conffile, sorted as dpkg lists them
	credsDir  string            // root-only directory of secrets
	stateDir  string            // StateDirectory= under /var/lib
	fields    map[string]string // control fields beyond Package/Version/Architecture
}

var specs = []pkgSpec{
	{
		name: "euterpe-edge", program: "euterpe-edge", unit: "euterpe-edge.service",
		envFile:   "/etc/euterpe/edge.env",
		conffiles: []string{"/etc/euterpe/edge.env", "/etc/euterpe/redis.conf"},
		credsDir:  "/etc/euterpe/edge.credentials", stateDir: "/var/lib/euterpe",
		fields: map[string]string{"Depends": "redis-server, adduser", "Recommends": "ffmpeg"},
	},
	{
		name: "euterpe-central", program: "euterpe-central", unit: "euterpe-central.service",
		envFile:   "/etc/euterpe/central.env",
		conffiles: []string{"/etc/euterpe/central.env"},
		credsDir:  "/etc/euterpe/central.credentials", stateDir: "/var/lib/euterpe-central",
		fields: map[string]string{"Depends": "adduser", "Recommends": "ffmpeg", "Suggests": "postgresql"},
	},
}

var arches = []string{"amd64", "arm64"}

// build is what the Makefile built and stamped.
type build struct {
	dist       string // directory of the .deb files
	debVersion string // Debian version of the packages
	version    string // what `<program> version` prints
}

func need(t *testing.T) build {
	t.Helper()
	b := build{dist: os.Getenv("EUTERPE_DIST"), debVersion: os.Getenv("DEB_VERSION"), version: os.Getenv("VERSION")}
	if b.dist == "" || b.debVersion == "" || b.version == "" {
		t.Fatal("EUTERPE_DIST, DEB_VERSION and VERSION are unset: run `make packages-check`")
	}
	return b
}

func (b build) deb(pkg, arch string) string {
	return filepath.Join(b.dist, pkg+"_"+b.debVersion+"_"+arch+".deb")
}

// run runs a command with a deadline and returns its combined output,
// failing the test when it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := try(name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func try(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdin = nil // a prompt (a conffile question) reads EOF and fails instead of hanging
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// tool finds a program the checks need: a missing one fails under CI and
// skips elsewhere.
func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed (apt-get install %s)", name, pkg)
		}
		t.Skipf("%s is not installed (apt-get install %s)", name, pkg)
	}
	return p
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
