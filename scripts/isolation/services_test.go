package isolation

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// servicesChild and redisOldChild mark the parts of the tests below that
// run in their network namespace.
const (
	servicesChild = "EUTERPE_ISOLATION_SERVICES"
	redisOldChild = "EUTERPE_ISOLATION_REDIS_OLD"
)

// A fresh clone's `down`, with pid files naming a process that is not one
// of its servers (as after a SIGKILL, an OOM kill or a container restart,
// once the pid is reused), signals nothing.
func TestDownSparesReusedPids(t *testing.T) {
	root, err := filepath.Abs("../..")
	must(t, err)
	clone := newClone(t, root, filepath.Join(t.TempDir(), "repo"))
	stranger := exec.Command("sleep", "60")
	must(t, stranger.Start())
	t.Cleanup(func() { _ = stranger.Process.Kill(); _ = stranger.Wait() })
	pid := strconv.Itoa(stranger.Process.Pid)
	files := map[string]string{
		"redis/redis.pid":   pid + "\n",
		"redis6/redis.pid":  pid + "\n",
		"s3/pid":            pid + "\n",
		"pg/postmaster.pid": pid + "\n" + filepath.Join(clone, ".run", "pg") + "\n1700000000\n5440\n",
	}
	for f, content := range files {
		path := filepath.Join(clone, ".run", f)
		must(t, os.MkdirAll(filepath.Dir(path), 0o755))
		must(t, os.WriteFile(path, []byte(content), 0o644))
	}
	if out, err := services(clone, nil, "down"); err != nil {
		t.Fatalf("down: %v\n%s", err, out)
	}
	time.Sleep(200 * time.Millisecond)
	if !alive(stranger.Process.Pid) {
		t.Fatalf("down signalled pid %s, which its pid files named but is no server of the clone", pid)
	}
}

// A clone under a directory closed to other users (root's 0700 home on
// Debian) gets its Postgres: as root, initdb runs as postgres, which
// cannot reach the clone's .run/, so the cluster lives where postgres can
// and .run/pg.dir says where; `down` and `up` find it again, a stale
// postmaster.pid naming a live stranger is neither trusted nor signalled,
// and a client-only Postgres (a bin directory without initdb) beside the
// server is not taken for it. Neither the postmaster nor versitygw holds
// the port lock.
func TestServicesInAClosedDirectory(t *testing.T) {
	if os.Getenv(servicesChild) == "" {
		reexecInNamespace(t, "TestServicesInAClosedDirectory", servicesChild)
		return
	}
	root := os.Getenv(servicesChild)
	for _, p := range []string{"runuser", "mount"} {
		testsvc.Program(t, p)
	}
	servers, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(servers) == 0 {
		testsvc.Unavailable(t, "the Postgres server (apt-get install postgresql)", os.ErrNotExist)
	}
	versitygw, err := exec.LookPath("versitygw")
	if err != nil {
		versitygw = filepath.Join(root, ".run", "bin", "versitygw")
		if _, err := os.Stat(versitygw); err != nil {
			testsvc.Unavailable(t, "versitygw (scripts/services.sh up s3 builds it)", err)
		}
	}

	// /usr/lib/postgresql as this mount namespace sees it: the servers
	// installed, and a newer version with only a client's bin directory.
	// The servers are bound read-only, and lib is not a TempDir: nothing
	// removing it recursively may reach the system's files.
	lib, err := os.MkdirTemp("", "pglib")
	must(t, err)
	must(t, os.Chmod(lib, 0o755))
	var created []string // removed one by one, deepest first, once unmounted
	t.Cleanup(func() {
		_ = exec.Command("umount", "-l", "/usr/lib/postgresql").Run()
		for i := len(created) - 1; i >= 0; i-- {
			_ = exec.Command("umount", "-l", created[i]).Run()
			_ = os.Remove(created[i])
		}
		_ = os.Remove(lib)
	})
	for _, initdb := range servers {
		version := filepath.Dir(filepath.Dir(initdb))
		dst := filepath.Join(lib, filepath.Base(version))
		must(t, os.Mkdir(dst, 0o755))
		created = append(created, dst)
		mount(t, "--bind", version, dst)
		mount(t, "-o", "remount,bind,ro", dst)
	}
	for _, p := range []string{"999", "999/bin", "999/bin/psql"} {
		created = append(created, filepath.Join(lib, p))
	}
	must(t, os.MkdirAll(filepath.Join(lib, "999", "bin"), 0o755))
	copyFile(t, "/bin/true", filepath.Join(lib, "999", "bin", "psql"))
	mount(t, "--rbind", lib, "/usr/lib/postgresql")

	home := filepath.Join(t.TempDir(), "home")
	must(t, os.Mkdir(home, 0o700))
	clone := newClone(t, root, filepath.Join(home, "repo"))
	must(t, os.MkdirAll(filepath.Join(clone, ".run", "bin"), 0o755))
	must(t, os.Symlink(versitygw, filepath.Join(clone, ".run", "bin", "versitygw")))
	lock := os.Getenv("EUTERPE_PORTS_LOCK")
	env := []string{"EUTERPE_PORTS_LOCK=" + lock}
	t.Cleanup(func() {
		if out, err := services(clone, env, "down"); err != nil {
			t.Errorf("down: %v\n%s", err, out)
		}
		b, err := os.ReadFile(filepath.Join(clone, ".run", "pg.dir"))
		if dir := strings.TrimSpace(string(b)); err == nil && strings.HasPrefix(filepath.Base(dir), "euterpe-test-pg-") {
			_ = os.RemoveAll(dir)
		}
	})

	out, err := services(clone, env, "up", "postgres")
	if err != nil {
		t.Fatalf("up postgres: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(clone, ".run", "pg.dir"))
	if err != nil {
		t.Fatalf("no .run/pg.dir: %v\n%s", err, out)
	}
	data := strings.TrimSpace(string(b))
	pg, err := user.Lookup("postgres")
	must(t, err)
	fi, err := os.Stat(data)
	must(t, err)
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || fi.Mode().Perm() != 0o700 || strconv.Itoa(int(st.Uid)) != pg.Uid {
		t.Fatalf("%s: mode %v, want 0700 and owned by postgres", data, fi.Mode())
	}
	url := readEnv(t, filepath.Join(clone, ".run", "env"))["EUTERPE_TEST_POSTGRES_URL"]
	query(t, url)
	postmaster := pidIn(t, filepath.Join(data, "postmaster.pid"))
	if holdsFile(postmaster, lock) {
		t.Errorf("the postmaster (pid %d) holds the port lock %s", postmaster, lock)
	}

	if out, err := services(clone, env, "down"); err != nil {
		t.Fatalf("down: %v\n%s", err, out)
	}
	waitFor(t, "the postmaster gone", func() bool { return !alive(postmaster) })

	// A pid file left behind, its pid reused by a stranger of the same
	// user, which pg_ctl would take for the postmaster.
	uid, _ := strconv.Atoi(pg.Uid)
	gid, _ := strconv.Atoi(pg.Gid)
	stranger := exec.Command("sleep", "60")
	stranger.Dir = "/"
	stranger.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	must(t, stranger.Start())
	t.Cleanup(func() { _ = stranger.Process.Kill(); _ = stranger.Wait() })
	stale := filepath.Join(data, "postmaster.pid")
	must(t, os.WriteFile(stale, []byte(fmt.Sprintf("%d\n%s\n1700000000\n5999\n", stranger.Process.Pid, data)), 0o600))
	must(t, os.Chown(stale, uid, gid))
	out, err = services(clone, env, "up", "postgres")
	if err != nil {
		t.Fatalf("up postgres again: %v\n%s", err, out)
	}
	if strings.Contains(out, "initialising") {
		t.Fatalf("the second up made a new cluster:\n%s", out)
	}
	url = readEnv(t, filepath.Join(clone, ".run", "env"))["EUTERPE_TEST_POSTGRES_URL"]
	if strings.Contains(url, ":5999/") {
		t.Fatalf("up took the stale postmaster.pid's port: %s", url)
	}
	query(t, url)
	if out, err := services(clone, env, "down"); err != nil {
		t.Fatalf("down: %v\n%s", err, out)
	}
	if !alive(stranger.Process.Pid) {
		t.Fatal("the stranger whose pid was in postmaster.pid is gone")
	}

	out, err = services(clone, env, "up", "s3")
	if err != nil {
		t.Fatalf("up s3: %v\n%s", err, out)
	}
	if s3 := pidIn(t, filepath.Join(clone, ".run", "s3", "pid")); holdsFile(s3, lock) {
		t.Errorf("versitygw (pid %d) holds the port lock %s", s3, lock)
	}
}

// A main Redis older than 7 (apt's redis-server on Ubuntu 22.04 and
// Debian 11) is named in a warning, and fails `up` under CI=true: the
// tests' Redis 7 paths would go untested.
func TestRedisOlderThan7(t *testing.T) {
	if os.Getenv(redisOldChild) == "" {
		reexecInNamespace(t, "TestRedisOlderThan7", redisOldChild)
		return
	}
	root := os.Getenv(redisOldChild)
	old := filepath.Join(root, ".run", "redis6", "redis-6.0.16", "src", "redis-server")
	if _, err := os.Stat(old); err != nil {
		testsvc.Unavailable(t, "the Redis 6.0 build (scripts/services.sh up redis6)", err)
	}
	bin := filepath.Join(t.TempDir(), "bin")
	must(t, os.Mkdir(bin, 0o755))
	must(t, os.Symlink(old, filepath.Join(bin, "redis-server")))
	clone := newClone(t, root, filepath.Join(t.TempDir(), "repo"))
	env := []string{"EUTERPE_PORTS_LOCK=" + os.Getenv("EUTERPE_PORTS_LOCK"), "PATH=" + bin + ":" + os.Getenv("PATH")}
	t.Cleanup(func() { _, _ = services(clone, env, "down") })

	out, err := services(clone, append(env, "CI="), "up", "redis")
	if err != nil {
		t.Fatalf("up redis: %v\n%s", err, out)
	}
	if !strings.Contains(out, "redis-server 6.0.16, older than 7") {
		t.Fatalf("no warning naming the version:\n%s", out)
	}
	out, err = services(clone, append(env, "CI=true"), "up", "redis")
	if err == nil {
		t.Fatalf("up redis under CI=true succeeded on Redis 6.0:\n%s", out)
	}
	for _, want := range []string{"XAUTOCLAIM", "EUTERPE_TEST_REDIS_URL", "CI=true"} {
		if !strings.Contains(out, want) {
			t.Errorf("the failure does not mention %s:\n%s", want, out)
		}
	}
}

// newClone copies the repository's scripts to dir, a clone with a fresh
// .run/ of its own.
func newClone(t *testing.T, root, dir string) string {
	t.Helper()
	must(t, os.MkdirAll(filepath.Join(dir, "scripts"), 0o755))
	scripts, _ := filepath.Glob(filepath.Join(root, "scripts", "*.sh"))
	for _, s := range scripts {
		copyFile(t, s, filepath.Join(dir, "scripts", filepath.Base(s)))
	}
	return dir
}

// services runs the clone's scripts/services.sh with args, in an
// environment naming no server, plus env.
func services(clone string, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(clone, "scripts", "services.sh"), args...)
	for _, kv := range cleanEnv() {
		if !strings.HasPrefix(kv, "CI=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mount(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
		t.Fatalf("mount %v: %v\n%s", args, err, out)
	}
}

func query(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	defer conn.Close(ctx)
	var one int
	must(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))
}

// pidIn is the pid on the first line of file.
func pidIn(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	must(t, err)
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	must(t, err)
	return pid
}

// alive reports whether process pid runs (a child of the test killed but
// not yet waited for is a zombie, which signal 0 would still find).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// holdsFile reports whether process pid has file open.
func holdsFile(pid int, file string) bool {
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && target == file {
			return true
		}
	}
	return false
}

// On Ubuntu the browser is chromium-browser (there is no chromium
// package), or the user names one with EUTERPE_CHROMIUM: either is
// enough for `up tools`, which installs nothing then.
func TestToolsTakeAnyChromium(t *testing.T) {
	for _, p := range append(runTools, "b3sum", "python3", "node", "openssl", "gcc", "systemd-analyze") {
		testsvc.Program(t, p)
	}
	root, err := filepath.Abs("../..")
	must(t, err)
	clone := newClone(t, root, filepath.Join(t.TempDir(), "repo"))
	bin := pathWithout(t, "chromium", "chromium-browser", "apt-get")
	browser := filepath.Join(t.TempDir(), "chromium-browser")
	must(t, os.WriteFile(browser, []byte("#!/bin/sh\nexit 0\n"), 0o755))
	for name, env := range map[string][]string{
		"chromium-browser": {"PATH=" + bin + ":" + filepath.Dir(browser)},
		"EUTERPE_CHROMIUM": {"PATH=" + bin, "EUTERPE_CHROMIUM=" + browser},
	} {
		t.Run(name, func(t *testing.T) {
			if out, err := services(clone, env, "up", "tools"); err != nil {
				t.Fatalf("up tools: %v\n%s", err, out)
			}
		})
	}
}

// No browser to be had (Ubuntu's chromium-browser is a snap, which does not
// install in a container; no apt-get here at all): `up tools` warns that
// the browser tests will be skipped and goes on, so every other test runs;
// under CI=true it stops, as those tests would fail.
func TestToolsWithoutAnyChromium(t *testing.T) {
	for _, p := range append(runTools, "b3sum", "python3", "node", "openssl", "gcc", "systemd-analyze") {
		testsvc.Program(t, p)
	}
	root, err := filepath.Abs("../..")
	must(t, err)
	clone := newClone(t, root, filepath.Join(t.TempDir(), "repo"))
	path := "PATH=" + pathWithout(t, "chromium", "chromium-browser", "apt-get")
	out, err := services(clone, []string{path}, "up", "tools")
	if err != nil || !strings.Contains(out, "browser tests will be skipped") {
		t.Fatalf("up tools without a browser: %v\n%s", err, out)
	}
	if out, err := services(clone, []string{path, "CI=true"}, "up", "tools"); err == nil || !strings.Contains(out, "no chromium") {
		t.Fatalf("up tools without a browser under CI=true: %v\n%s", err, out)
	}
}

// `make run` asks only for what the running system calls, not for the
// programs only tests use.
func TestRunToolsAreFew(t *testing.T) {
	for _, p := range runTools {
		testsvc.Program(t, p)
	}
	root, err := filepath.Abs("../..")
	must(t, err)
	clone := newClone(t, root, filepath.Join(t.TempDir(), "repo"))
	bin := pathWithout(t, "chromium", "chromium-browser", "node", "python3", "b3sum", "openssl", "gcc", "systemd-analyze", "apt-get")
	if out, err := services(clone, []string{"PATH=" + bin}, "up", "run-tools"); err != nil {
		t.Fatalf("up run-tools: %v\n%s", err, out)
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	must(t, err)
	_, run, _ := strings.Cut(string(mk), "\nrun:")
	run, _, _ = strings.Cut(run, "\n\n")
	if !strings.Contains(run, "services.sh up run-tools") || strings.Contains(run, "services.sh up tools") {
		t.Fatalf("the Makefile's run target does not bring up only run-tools:\nrun:%s", run)
	}
}

// runTools are the programs `make run` calls.
var runTools = []string{"ffmpeg", "curl", "ss", "flock"}

// pathWithout is a PATH directory with every program of the system's but
// names.
func pathWithout(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	skip := map[string]bool{}
	for _, n := range names {
		skip[n] = true
	}
	for _, d := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			link := filepath.Join(dir, e.Name())
			if skip[e.Name()] || e.IsDir() {
				continue
			}
			if _, err := os.Lstat(link); err == nil {
				continue
			}
			must(t, os.Symlink(filepath.Join(d, e.Name()), link))
		}
	}
	return dir
}
