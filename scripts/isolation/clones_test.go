package isolation

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// clonesChild marks the part of TestClonesGetTheirOwnServices running in
// its network namespace.
const clonesChild = "EUTERPE_ISOLATION_CLONES"

// Two clones bringing their services up at the same moment, with the usual
// port taken by something else, each get a Redis of their own on a free
// port, with its data in their own .run/; a second `up` finds the same one;
// `down` stops only each clone's own.
func TestClonesGetTheirOwnServices(t *testing.T) {
	if os.Getenv(clonesChild) == "" {
		reexecInNamespace(t, "TestClonesGetTheirOwnServices", clonesChild)
		return
	}
	root := os.Getenv(clonesChild)
	busy, err := net.Listen("tcp", "127.0.0.1:6390") // not a Redis
	must(t, err)
	defer busy.Close()

	clones := []string{filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")}
	lock := os.Getenv("EUTERPE_PORTS_LOCK")
	for _, c := range clones {
		newClone(t, root, c)
		t.Cleanup(func() { _ = exec.Command(filepath.Join(c, "scripts", "services.sh"), "down").Run() })
	}
	// An .run/env from before it was kept private.
	must(t, os.MkdirAll(filepath.Join(clones[0], ".run"), 0o755))
	must(t, os.WriteFile(filepath.Join(clones[0], ".run", "env"), []byte("export EUTERPE_EARLIER=1\n"), 0o644))
	up := func(c string) (string, error) {
		cmd := exec.Command(filepath.Join(c, "scripts", "services.sh"), "up", "redis")
		cmd.Env = append(cleanEnv(), "EUTERPE_PORTS_LOCK="+lock)
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s: %v\n%s", c, err, out)
		}
		b, err := os.ReadFile(filepath.Join(c, ".run", "env"))
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "export EUTERPE_TEST_REDIS_URL="); ok {
				return v, nil
			}
		}
		return "", fmt.Errorf("%s: no EUTERPE_TEST_REDIS_URL in .run/env:\n%s", c, b)
	}
	urls := make([]string, len(clones))
	errs := make([]error, len(clones))
	var wg sync.WaitGroup
	for i, c := range clones {
		wg.Add(1)
		go func() { defer wg.Done(); urls[i], errs[i] = up(c) }()
	}
	wg.Wait()
	for _, err := range errs {
		must(t, err)
	}
	if urls[0] == urls[1] {
		t.Fatalf("both clones got %s", urls[0])
	}
	ctx := context.Background()
	for i, u := range urls {
		if strings.Contains(u, ":6390/") {
			t.Fatalf("clone %d got the taken port: %s", i, u)
		}
		opt, err := redis.ParseURL(u)
		must(t, err)
		c := redis.NewClient(opt)
		dir := c.ConfigGet(ctx, "dir").Val()["dir"]
		c.Close()
		want, _ := filepath.EvalSymlinks(filepath.Join(clones[i], ".run", "redis"))
		if dir != want {
			t.Fatalf("clone %d's redis keeps its data in %q, want %q", i, dir, want)
		}
		if pid := pidIn(t, filepath.Join(clones[i], ".run", "redis", "redis.pid")); holdsFile(pid, lock) {
			t.Errorf("clone %d's redis (pid %d) holds the port lock %s", i, pid, lock)
		}
		fi, err := os.Stat(filepath.Join(clones[i], ".run", "env"))
		must(t, err)
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("clone %d's .run/env has mode %v, want 0600 (it may hold passwords)", i, fi.Mode().Perm())
		}
	}
	again, err := up(clones[0])
	must(t, err)
	if again != urls[0] {
		t.Fatalf("a second up gave %s, want the running %s", again, urls[0])
	}
	down := exec.Command(filepath.Join(clones[0], "scripts", "services.sh"), "down")
	if out, err := down.CombinedOutput(); err != nil {
		t.Fatalf("down: %v\n%s", err, out)
	}
	answers := func(u string) bool {
		opt, _ := redis.ParseURL(u)
		c := redis.NewClient(opt)
		defer c.Close()
		// A stopped server refuses at once; a live one on a busy machine
		// may take a while to answer.
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return c.Ping(ctx).Err() == nil
	}
	for deadline := time.Now().Add(10 * time.Second); answers(urls[0]) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if answers(urls[0]) {
		t.Fatal("clone a's redis still answers after its down")
	}
	if !answers(urls[1]) {
		t.Fatal("clone a's down stopped clone b's redis")
	}
}

// reexecInNamespace runs test name of this binary again inside a network
// namespace of its own (loopback only, every port free) and a private mount
// namespace, with env set to the repository root, and fails t when it
// fails there.
func reexecInNamespace(t *testing.T, name, env string) {
	t.Helper()
	if os.Getuid() != 0 {
		testsvc.Unavailable(t, "a network namespace (unshare -n needs root)", os.ErrPermission)
	}
	for _, p := range []string{"unshare", "ip", "flock", "ss", "redis-server", "redis-cli"} {
		testsvc.Program(t, p)
	}
	root, err := filepath.Abs("../..")
	must(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "-n", "-m", "--propagation", "private", "--", "sh", "-c", `ip link set lo up && exec "$0" "$@"`,
		os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.count=1")
	cmd.Env = append(cleanEnv(), env+"="+root, "EUTERPE_PORTS_LOCK="+filepath.Join(t.TempDir(), "ports.lock"))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("inside the namespace: %v\n%s", err, out)
	}
}
