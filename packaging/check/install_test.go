package check

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The amd64 packages install with dpkg on this machine and behave as the
// README says: programs on PATH print their version, both units pass
// systemd-analyze verify, the Redis snippet gives Redis the settings the
// edge needs, an upgrade keeps an edited conffile and a rollback installs,
// removal keeps state, purge deletes it (and keeps a credentials directory
// that still holds secrets).
//
// It changes the machine, so it runs only as root, only where no systemd
// is running (nothing could be started by accident; the scripts also
// honour policy-rc.d), and only where neither package, their state nor
// /etc/euterpe exist yet; it purges what it installed and removes the
// euterpe user if it created it.
func TestInstallRemovePurge(t *testing.T) {
	b := need(t)
	refuse := t.Skipf
	if os.Getenv("CI") == "true" {
		refuse = t.Fatalf
	}
	if os.Geteuid() != 0 {
		refuse("the install test needs root")
	}
	if exists("/run/systemd/system") {
		refuse("systemd is running here: the install test runs only where no daemon could be started (CI, a container)")
	}
	for _, s := range specs {
		if st, _ := try("dpkg-query", "-W", "-f=${Status}", s.name); strings.Contains(st, "installed") {
			refuse("%s is already installed here (%s): refusing to touch it", s.name, st)
		}
	}
	for _, p := range []string{"/etc/euterpe", "/var/lib/euterpe", "/var/lib/euterpe-central"} {
		if exists(p) {
			refuse("%s exists: refusing to purge what the test did not create", p)
		}
	}
	systemdAnalyze := tool(t, "systemd-analyze", "systemd")
	tool(t, "dpkg", "dpkg")
	if st, _ := try("dpkg-query", "-W", "-f=${Status}", "redis-server"); st != "install ok installed" {
		run(t, "apt-get", "-o", "DPkg::Lock::Timeout=180", "install", "-y", "-q", "--no-install-recommends", "redis-server")
	}
	if !exists("/usr/sbin/policy-rc.d") {
		// No service starts from any maintainer script while we install.
		if err := os.WriteFile("/usr/sbin/policy-rc.d", []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Remove("/usr/sbin/policy-rc.d") })
	}
	users := []string{"euterpe", "euterpe-central"}
	var created []string
	for _, u := range users {
		if _, err := try("getent", "passwd", u); err != nil {
			created = append(created, u)
		}
	}
	t.Cleanup(func() {
		_, _ = dpkg("--purge", "euterpe-edge", "euterpe-central")
		for _, p := range []string{"/etc/euterpe", "/var/lib/euterpe", "/var/lib/euterpe-central"} {
			_ = os.RemoveAll(p)
		}
		for _, u := range created {
			_, _ = try("userdel", u)
			_, _ = try("groupdel", u)
		}
	})

	edge, central := b.deb("euterpe-edge", "amd64"), b.deb("euterpe-central", "amd64")
	mustDpkg(t, "--install", edge, central)
	for _, s := range specs {
		if st := status(t, s.name); st != "install ok installed "+b.debVersion {
			t.Fatalf("%s: %q", s.name, st)
		}
	}

	t.Run("programs", func(t *testing.T) {
		for _, p := range []string{"/usr/bin/euterpe-edge", "/usr/bin/euterpe-central", "/usr/bin/euterpectl"} {
			if got := strings.TrimSpace(run(t, p, "version")); got != b.version {
				t.Errorf("%s version: %q, want %q", p, got, b.version)
			}
		}
	})

	t.Run("users and credentials", func(t *testing.T) {
		// One user each: a program one daemon runs on others' input (ffmpeg,
		// an exec backend) must not read the other daemon's secrets.
		for _, s := range specs {
			unit := readFile(t, "/lib/systemd/system/"+s.name+".service")
			user := regexp.MustCompile(`(?m)^User=(\S+)$`).FindStringSubmatch(unit)
			if user == nil {
				t.Fatalf("%s.service names no User=", s.name)
			}
			run(t, "getent", "passwd", user[1])
			for _, other := range specs {
				if other.name != s.name && strings.Contains(readFile(t, "/lib/systemd/system/"+other.name+".service"), "User="+user[1]+"\n") {
					t.Errorf("%s and %s run as the same user %s", s.name, other.name, user[1])
				}
			}
		}
		for _, s := range specs {
			st, err := os.Stat(s.credsDir)
			if err != nil || st.Mode().Perm() != 0o700 || !st.IsDir() {
				t.Errorf("%s: %v %v, want a directory of mode 0700", s.credsDir, st.Mode(), err)
			}
		}
	})

	t.Run("units verify", func(t *testing.T) {
		out, err := try(systemdAnalyze, "verify", "/lib/systemd/system/euterpe-edge.service", "/lib/systemd/system/euterpe-central.service")
		if err != nil || strings.TrimSpace(out) != "" {
			t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
		}
	})

	t.Run("redis snippet", func(t *testing.T) { redisSnippet(t) })

	t.Run("upgrade keeps the edited env file, rollback installs", func(t *testing.T) {
		const edit = "EUTERPE_LOG_LEVEL=debug\n"
		f, err := os.OpenFile("/etc/euterpe/edge.env", os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.WriteString(edit)
		_ = f.Close()
		newer := bumped(t, edge, b.debVersion+".1")
		mustDpkg(t, "--install", newer)
		if st := status(t, "euterpe-edge"); st != "install ok installed "+b.debVersion+".1" {
			t.Fatalf("after upgrade: %q", st)
		}
		mustDpkg(t, "--install", edge) // rollback: dpkg downgrades with a warning
		if st := status(t, "euterpe-edge"); st != "install ok installed "+b.debVersion {
			t.Fatalf("after rollback: %q", st)
		}
		env, _ := os.ReadFile("/etc/euterpe/edge.env")
		if !strings.HasSuffix(string(env), edit) {
			t.Fatalf("the operator's edit of /etc/euterpe/edge.env was lost:\n%s", env)
		}
		run(t, "/usr/bin/euterpe-edge", "version")
	})

	// What systemd's StateDirectory= and an operator would have left: the
	// edge's state, a library root inside it, central's state and keyring.
	for _, p := range []string{"/var/lib/euterpe/library.db", "/var/lib/euterpe/library.db-wal", "/var/lib/euterpe/worker-id",
		"/var/lib/euterpe/trash/1/b.flac", "/var/lib/euterpe/media/song.flac",
		"/var/lib/euterpe-central/central.db", "/etc/euterpe/central.credentials/keyring"} {
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("state\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A thumbnail cache moved to a bigger disk by a symlink: purge removes
	// the link, never what it points at.
	elsewhere := t.TempDir()
	movedThumb := filepath.Join(elsewhere, "c.jpg")
	if err := os.WriteFile(movedThumb, []byte("thumb\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll("/var/lib/euterpe/thumbs"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, "/var/lib/euterpe/thumbs"); err != nil {
		t.Fatal(err)
	}

	t.Run("remove keeps state and config", func(t *testing.T) {
		mustDpkg(t, "--remove", "euterpe-edge")
		if st := status(t, "euterpe-edge"); !strings.HasPrefix(st, "deinstall ok config-files") {
			t.Fatalf("after remove: %q", st)
		}
		for _, p := range []string{"/usr/bin/euterpe-edge", "/lib/systemd/system/euterpe-edge.service"} {
			if exists(p) {
				t.Errorf("%s left after remove", p)
			}
		}
		for _, p := range []string{"/var/lib/euterpe/library.db", "/etc/euterpe/edge.env"} {
			if !exists(p) {
				t.Errorf("%s deleted by remove", p)
			}
		}
		// euterpectl stays, central's copy now being the alternative.
		if got := strings.TrimSpace(run(t, "/usr/bin/euterpectl", "version")); got != b.version {
			t.Errorf("euterpectl after removing the edge: %q", got)
		}
	})

	t.Run("purge deletes state and config", func(t *testing.T) {
		out := mustDpkg(t, "--purge", "euterpe-edge")
		for _, p := range []string{"/var/lib/euterpe/library.db", "/var/lib/euterpe/library.db-wal", "/var/lib/euterpe/worker-id",
			"/var/lib/euterpe/thumbs", "/var/lib/euterpe/trash", "/etc/euterpe/edge.env", "/etc/euterpe/redis.conf", "/etc/euterpe/edge.credentials"} {
			if exists(p) {
				t.Errorf("%s left after purge", p)
			}
		}
		if _, err := os.Stat(movedThumb); err != nil {
			t.Errorf("purge followed the thumbs symlink: %v", err)
		}
		// The user's files in a library root inside the state directory
		// are not the package's.
		if !exists("/var/lib/euterpe/media/song.flac") || !strings.Contains(out, "kept /var/lib/euterpe") {
			t.Errorf("purge must keep a library root inside the state directory, and say so:\n%s", out)
		}
		if !exists("/var/lib/euterpe-central/central.db") {
			t.Error("purging the edge deleted central's state")
		}
		mustDpkg(t, "--remove", "euterpe-central")
		if !exists("/var/lib/euterpe-central/central.db") {
			t.Error("remove deleted central's state")
		}
		out = mustDpkg(t, "--purge", "euterpe-central")
		for _, p := range []string{"/var/lib/euterpe-central", "/etc/euterpe/central.env", "/usr/bin/euterpectl"} {
			if exists(p) {
				t.Errorf("%s left after purge", p)
			}
		}
		if !exists("/etc/euterpe/central.credentials/keyring") || !strings.Contains(out, "kept /etc/euterpe/central.credentials") {
			t.Errorf("purge must keep a credentials directory holding secrets, and say so:\n%s", out)
		}
		for _, u := range users {
			if _, err := try("getent", "passwd", u); err != nil {
				t.Errorf("purge removed the %s user; system users stay", u)
			}
		}
	})
}

// readFile returns the text of path.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dpkg runs dpkg, waiting while another apt or dpkg holds its lock (other
// work on the machine may be installing packages).
func dpkg(args ...string) (string, error) {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, err := try("dpkg", args...)
		if err == nil || !strings.Contains(out, "lock") || time.Now().After(deadline) {
			return out, err
		}
		time.Sleep(2 * time.Second)
	}
}

func mustDpkg(t *testing.T, args ...string) string {
	t.Helper()
	out, err := dpkg(args...)
	if err != nil {
		t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func status(t *testing.T, pkg string) string {
	t.Helper()
	out, _ := try("dpkg-query", "-W", "-f=${Status} ${Version}", pkg)
	return strings.TrimSpace(out)
}

// bumped is deb with a higher version and nothing else changed: what the
// next release looks like to dpkg, for the upgrade and rollback steps.
func bumped(t *testing.T, deb, version string) string {
	t.Helper()
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	run(t, "dpkg-deb", "--raw-extract", deb, tree)
	control := filepath.Join(tree, "DEBIAN", "control")
	text, err := os.ReadFile(control)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(text), "\n") {
		if strings.HasPrefix(l, "Version: ") {
			l = "Version: " + version
		}
		lines = append(lines, l)
	}
	if err := os.WriteFile(control, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "bumped.deb")
	run(t, "dpkg-deb", "--root-owner-group", "-Zgzip", "--build", tree, out)
	return out
}

// redisSnippet starts a private Redis (unix socket only, in a temporary
// directory) whose configuration includes the installed
// /etc/euterpe/redis.conf, as the README tells the operator to do, and reads
// the settings back.
func redisSnippet(t *testing.T) {
	server := tool(t, "redis-server", "redis-server")
	cli := tool(t, "redis-cli", "redis-tools")
	dir := t.TempDir()
	sock := filepath.Join(dir, "redis.sock")
	conf := filepath.Join(dir, "redis.conf")
	text := fmt.Sprintf("port 0\nunixsocket %s\ndir %s\nappendonly no\nmaxmemory-policy allkeys-lru\ninclude /etc/euterpe/redis.conf\n", sock, dir)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(server, conf)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("unix", sock); err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server did not start:\n%s", logs.String())
		}
	}
	for k, want := range map[string]string{"appendonly": "yes", "appendfsync": "everysec", "maxmemory-policy": "noeviction"} {
		got := strings.Fields(run(t, cli, "-s", sock, "CONFIG", "GET", k))
		if len(got) != 2 || got[1] != want {
			t.Errorf("CONFIG GET %s: %v, want %s", k, got, want)
		}
	}
}
