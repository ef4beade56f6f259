package testsvc

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// PrivateRedis starts a server of the program and version EachRedis chose
// for t, of its own, for a test that must change what the shared servers
// are shared for (maxmemory, say), and stops it when t ends. It listens
// on a Unix socket in t's temporary directory, with no TCP port, no
// persistence and the extra configuration given as "name value" pairs
// ("maxmemory", "1mb"). The program is the one the shared server runs, as
// its INFO names it.
func PrivateRedis(t *testing.T, conf ...string) *redis.Client {
	t.Helper()
	shared, _ := Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := shared.Info(ctx, "server").Result()
	if err != nil {
		t.Fatalf("INFO server: %v", err)
	}
	exe := ""
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "executable:"); ok {
			exe = v
		}
	}
	if _, err := os.Stat(exe); err != nil {
		// A server started by a name found on PATH reports that name
		// joined to its working directory.
		if exe, err = exec.LookPath(filepath.Base(exe)); err != nil {
			t.Fatalf("the shared Redis server's program is not found: %v", err)
		}
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "redis.sock")
	args := []string{"--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no", "--dir", dir}
	for i := 0; i+1 < len(conf); i += 2 {
		args = append(args, "--"+conf[i], conf[i+1])
	}
	cmd := exec.Command(exe, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", exe, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	t.Cleanup(func() { _ = c.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("private %s did not answer on %s", exe, sock)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return c
}
