package testsvc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// foreignServer starts a Redis of the test's own (on a unix socket, so it
// takes no port) standing for a server someone else uses, and returns its
// URL and a database-0 client.
func foreignServer(t *testing.T) (string, *redis.Client) {
	t.Helper()
	bin := Program(t, "redis-server")
	dir := t.TempDir()
	sock := filepath.Join(dir, "redis.sock")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	u := "unix://" + sock
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock})
	t.Cleanup(func() { _ = c.Close() })
	for i := 0; ; i++ {
		if c.Ping(context.Background()).Err() == nil {
			break
		}
		if i > 100 {
			t.Fatal("private redis-server did not start")
		}
		time.Sleep(50 * time.Millisecond)
	}
	surveyed.Delete(u)
	t.Cleanup(func() { surveyed.Delete(u) })
	return u, c
}

// inDB runs f on a client of database n of the server c is on.
func inDB(t *testing.T, c *redis.Client, n int, f func(*redis.Client)) {
	t.Helper()
	o := *c.Options()
	o.DB = n
	d := redis.NewClient(&o)
	defer d.Close()
	f(d)
}

func keysOf(t *testing.T, c *redis.Client, n int) []string {
	t.Helper()
	var keys []string
	inDB(t, c, n, func(d *redis.Client) { keys = d.Keys(context.Background(), "*").Val() })
	return keys
}

// Databases 1..15 holding keys no test wrote make the server refused,
// whichever database a test would be handed: survey names them, and a
// claim of such a database fails, gives its lock back and leaves the keys.
func TestForeignKeysRefused(t *testing.T) {
	u, c := foreignServer(t)
	ctx := context.Background()
	inDB(t, c, 3, func(d *redis.Client) { d.Set(ctx, "production:key", "v", 0) })
	c.XAdd(ctx, &redis.XAddArgs{Stream: "jobs:stream", Values: []string{"job_id", "j1"}}) // db 0 is never a test db

	err := survey(ctx, c, u)
	var fe *ForeignKeysError
	if !errors.As(err, &fe) || len(fe.Keys) != 1 || fe.Keys[3] != 1 {
		t.Fatalf("survey: %v, want database 3 with 1 key", err)
	}
	for _, want := range []string{"refusing to use redis", "database 3 (1 keys)", "EUTERPE_TEST_REDIS_URL", "scripts/services.sh up"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}

	// Hand out every database: fourteen are taken, 3 is refused.
	var leases []*dbLease
	refused := 0
	for range testDBs {
		l, err := acquireDB(ctx, c, u)
		if errors.As(err, &fe) {
			refused++
			if fe.Keys[3] != 1 {
				t.Fatalf("refused %v, want database 3", fe.Keys)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if l.DB == 3 {
			t.Fatal("database 3 handed to a test")
		}
		leases = append(leases, l)
	}
	if refused == 0 {
		t.Fatal("database 3 was never refused")
	}
	for _, l := range leases {
		if err := l.flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l.release(); err != nil {
			t.Fatal(err)
		}
	}
	if got := keysOf(t, c, 3); len(got) != 1 || got[0] != "production:key" {
		t.Fatalf("database 3 now %v", got)
	}
	if n := c.XLen(ctx, "jobs:stream").Val(); n != 1 {
		t.Fatalf("jobs:stream in database 0 has %d entries", n)
	}
	if left := c.Keys(ctx, dbLockPrefix+"*").Val(); len(left) != 0 {
		t.Fatalf("locks or markers left in database 0: %v", left)
	}
}

// The check and the flush are one script: a key written after a clean
// survey, before the claim, is seen by the claim and kept.
func TestClaimSeesKeysWrittenAfterSurvey(t *testing.T) {
	u, c := foreignServer(t)
	ctx := context.Background()
	if err := survey(ctx, c, u); err != nil {
		t.Fatal(err)
	}
	for n := 1; n <= testDBs; n++ {
		inDB(t, c, n, func(d *redis.Client) { d.Set(ctx, "arrived:later", n, 0) })
	}
	_, err := acquireDB(ctx, c, u)
	var fe *ForeignKeysError
	if !errors.As(err, &fe) {
		t.Fatalf("claim: %v, want a ForeignKeysError", err)
	}
	for n := 1; n <= testDBs; n++ {
		if got := keysOf(t, c, n); len(got) != 1 {
			t.Fatalf("database %d now %v", n, got)
		}
	}
}

// What a crashed test left (keys under a marker) is flushed by the next
// claim; a marker of an empty database no test holds is dropped by survey.
func TestLeftoversOfCrashedTestFlushed(t *testing.T) {
	u, c := foreignServer(t)
	ctx := context.Background()
	for n := 1; n <= testDBs; n++ {
		inDB(t, c, n, func(d *redis.Client) { d.Set(ctx, "left:by:test", n, 0) })
		c.Set(ctx, fmt.Sprintf("%s%d%s", dbLockPrefix, n, markerSuffix), "crashed-owner", 0)
	}
	c.Set(ctx, dbLockPrefix+"99"+markerSuffix, "x", 0) // outside 1..15: not ours to judge
	if err := survey(ctx, c, u); err != nil {
		t.Fatalf("survey: %v", err)
	}
	l, err := acquireDB(ctx, c, u)
	if err != nil {
		t.Fatal(err)
	}
	if got := keysOf(t, c, l.DB); len(got) != 0 {
		t.Fatalf("claimed database %d still holds %v", l.DB, got)
	}
	if err := l.flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.release(); err != nil {
		t.Fatal(err)
	}
	surveyed.Delete(u)
	if err := survey(ctx, c, u); err != nil {
		t.Fatal(err)
	}
	if c.Exists(ctx, fmt.Sprintf("%s%d%s", dbLockPrefix, l.DB, markerSuffix)).Val() != 0 {
		t.Fatal("marker of the empty database kept")
	}
}

// A lease whose marker another owner has taken (its lock expired and the
// database was handed on) does not flush the new holder's keys.
func TestFlushOnlyUnderOwnMarker(t *testing.T) {
	u, c := foreignServer(t)
	ctx := context.Background()
	l, err := acquireDB(ctx, c, u)
	if err != nil {
		t.Fatal(err)
	}
	defer l.release()
	inDB(t, c, l.DB, func(d *redis.Client) { d.Set(ctx, "next:holder", 1, 0) })
	c.Set(ctx, l.marker(), "next-holder", 0)
	if err := l.flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := keysOf(t, c, l.DB); len(got) != 1 {
		t.Fatalf("database %d now %v, want the next holder's key kept", l.DB, got)
	}
}

// Through the public helper: Redis(t) on a server with foreign keys fails
// the test with the refusal (under CI and not), and the keys stay.
func TestRedisRefusesForeignServer(t *testing.T) {
	u, c := foreignServer(t)
	ctx := context.Background()
	inDB(t, c, 7, func(d *redis.Client) { d.HSet(ctx, "job:prod", "status", "queued") })
	cmd := exec.Command(os.Args[0], "-test.run=^TestUnavailableChild$", "-test.v", "-test.count=1")
	env := []string{childService + "=redis", "EUTERPE_TEST_REDIS_URL=" + u}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k != childService && k != "EUTERPE_TEST_REDIS_URL" {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--- FAIL: TestUnavailableChild") ||
		!strings.Contains(string(out), "refusing to use redis") || !strings.Contains(string(out), "database 7 (1 keys)") {
		t.Fatalf("want the child to fail with the refusal (err %v):\n%s", err, out)
	}
	if v := keysOf(t, c, 7); len(v) != 1 {
		t.Fatalf("database 7 now %v", v)
	}
	if left := c.Keys(ctx, dbLockPrefix+"*").Val(); len(left) != 0 {
		t.Fatalf("locks or markers left in database 0: %v", left)
	}
}
