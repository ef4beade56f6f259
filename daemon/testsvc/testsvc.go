package testsvc

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon"
)

// Unavailable skips t, or fails it when CI=true, because service is
// unreachable. The message says how to start it.
func Unavailable(t testing.TB, service string, err error) {
	t.Helper()
	msg := daemon.CapMessage(daemon.RedactURL(fmt.Sprintf(
		"%s unavailable: %v (start it with: scripts/services.sh up, then load .run/env)", service, err)))
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// RedisURL is the Redis tests use: EUTERPE_TEST_REDIS_URL, which
// scripts/services.sh sets to this clone's private server. There is no
// default: a Redis answering on the usual port may be a production one.
func RedisURL() string { return os.Getenv("EUTERPE_TEST_REDIS_URL") }

// Redis returns a client on a real Redis server, on a logical database
// (1..15) that no other test on the machine uses meanwhile: the database is
// locked in database 0 for the test's lifetime (see acquireDB), flushed
// before and after the test, then released. The server is the one
// EachRedis chose for t (or a parent of t), else EUTERPE_TEST_REDIS_URL.
// A server whose databases 1..15 hold keys no test wrote is refused (the
// test fails with a ForeignKeysError) and left as it was.
func Redis(t testing.TB) (*redis.Client, *redis.Options) {
	t.Helper()
	srv := serverFor(t)
	if srv.URL == "" {
		Unavailable(t, srv.Name+" ("+srv.Env+" unset)", errNotConfigured)
	}
	opts, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatalf("%s: %v", srv.Env, daemon.RedactURL(err.Error()))
	}
	ctlOpts := *opts
	ctlOpts.DB = 0
	ctlOpts.PoolSize = 2
	ctl := redis.NewClient(&ctlOpts)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := ctl.Ping(ctx).Err(); err != nil {
		_ = ctl.Close()
		Unavailable(t, srv.Name+" at "+srv.URL, err)
	}
	checkVersion(t, srv, ctl)
	if err := survey(ctx, ctl, srv.URL); err != nil {
		_ = ctl.Close()
		t.Fatalf("%s: %v", srv.Env, err)
	}
	wait, cancelWait := context.WithTimeout(context.Background(), dbLockWait)
	lease, err := acquireDB(wait, ctl, srv.URL)
	cancelWait()
	if err != nil {
		_ = ctl.Close()
		t.Fatalf("redis test database (%s): %v", srv.Env, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := lease.flush(ctx); err != nil {
			t.Errorf("flush redis test db %d: %v", lease.DB, err)
		}
		_ = lease.release()
		_ = ctl.Close()
	})
	opts.DB = lease.DB
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() }) // runs before the flush above
	return c, opts
}

// PostgresURL is the server tests create databases on:
// EUTERPE_TEST_POSTGRES_URL (this clone's private server, from
// scripts/services.sh, unless the user named another). No default either.
func PostgresURL() string { return os.Getenv("EUTERPE_TEST_POSTGRES_URL") }

// Postgres creates a fresh, empty database for the test and returns its URL;
// the database is dropped when the test ends.
func Postgres(t testing.TB) string {
	t.Helper()
	if PostgresURL() == "" {
		Unavailable(t, "postgres (EUTERPE_TEST_POSTGRES_URL unset)", errNotConfigured)
	}
	admin, err := sql.Open("pgx", PostgresURL())
	if err != nil {
		t.Fatalf("EUTERPE_TEST_POSTGRES_URL: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		_ = admin.Close()
		Unavailable(t, "postgres at "+PostgresURL(), err)
	}
	name := "euterpe_t_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "")
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		_ = admin.Close()
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		_ = admin.Close()
	})
	u, _ := url.Parse(PostgresURL())
	u.Path = "/" + name
	return u.String()
}

// Program returns the path of an external program the test needs (ffmpeg,
// ffprobe, versitygw), skipping or failing like an unreachable service.
func Program(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Unavailable(t, name, err)
	}
	return p
}
