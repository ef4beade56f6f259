package testsvc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon"
)

// The edge runs on Redis 7 and on Redis 6.0.16 (JetPack 6), whose missing
// commands (XAUTOCLAIM, XPENDING … IDLE, group lag) send it down fallback
// paths. EachRedis runs a test on both servers for real:
// EUTERPE_TEST_REDIS_URL and EUTERPE_TEST_REDIS6_URL, the private 6.0
// server scripts/services.sh builds from ../shared/vendor.

// Redis6Env names the URL of the Redis 6.0 server.
const Redis6Env = "EUTERPE_TEST_REDIS6_URL"

// RedisServer is one server EachRedis runs tests on.
type RedisServer struct {
	Name string // subtest name: "redis" or "redis6.0"
	URL  string // "" when not configured
	Env  string // the variable URL comes from
	// Version, when set, is the prefix redis_version must have.
	Version string
	// MinMajor, when set, is the lowest major version CI accepts: the
	// default server stands for Redis 7, and a 6.x there would repeat the
	// 6.0 run and leave the 7-only paths (XAUTOCLAIM) untested.
	MinMajor int
}

// RedisServers are the servers EachRedis runs on, default first.
func RedisServers() []RedisServer {
	return []RedisServer{
		{Name: "redis", URL: RedisURL(), Env: "EUTERPE_TEST_REDIS_URL", MinMajor: 7},
		{Name: "redis6.0", URL: os.Getenv(Redis6Env), Env: Redis6Env, Version: "6.0."},
	}
}

// bound maps the full name of each EachRedis subtest to its server;
// Redis(t) in that subtest, or in any subtest below it, uses that server.
var bound sync.Map // test name -> RedisServer

// EachRedis runs f as one subtest per server of RedisServers. Inside f,
// Redis(t) (from any helper, at any subtest depth) returns a database on
// that subtest's server. The 6.0 subtest is skipped when
// EUTERPE_TEST_REDIS6_URL is unset or the server does not answer, and fails
// instead under CI=true; it fails when the server is not Redis 6.0.
func EachRedis(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	for _, srv := range RedisServers() {
		t.Run(srv.Name, func(t *testing.T) {
			if srv.URL == "" {
				Unavailable(t, srv.Name+" ("+srv.Env+" unset)", errNotConfigured)
			}
			bound.Store(t.Name(), srv)
			t.Cleanup(func() { bound.Delete(t.Name()) })
			f(t)
		})
	}
}

type notConfigured struct{}

func (notConfigured) Error() string { return "not configured" }

var errNotConfigured error = notConfigured{}

// serverFor is the server EachRedis bound to t or one of its parents, else
// the default server.
func serverFor(t testing.TB) RedisServer {
	name := t.Name()
	for {
		if v, ok := bound.Load(name); ok {
			return v.(RedisServer)
		}
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			return RedisServers()[0]
		}
		name = name[:i]
	}
}

// checkVersion fails t when srv must be a given version and is not, or,
// under CI=true, is older than its MinMajor.
func checkVersion(t testing.TB, srv RedisServer, c *redis.Client) {
	minMajor := srv.MinMajor
	if os.Getenv("CI") != "true" {
		minMajor = 0
	}
	if srv.Version == "" && minMajor == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		t.Fatalf("%s INFO server: %v", srv.Name, err)
	}
	if err := versionFits(info, srv.Version, minMajor); err != nil {
		t.Fatalf("%s at %s (%s): %v", srv.Name, daemon.RedactURL(srv.URL), srv.Env, err)
	}
}

// versionFits checks the redis_version of an INFO server answer against a
// required prefix and a lowest major version (either may be zero).
func versionFits(info, prefix string, minMajor int) error {
	_, rest, ok := strings.Cut(info, "redis_version:")
	version, _, _ := strings.Cut(rest, "\n")
	version = strings.TrimSpace(version)
	if !ok || version == "" {
		return errors.New("INFO server names no redis_version")
	}
	if prefix != "" && !strings.HasPrefix(version, prefix) {
		return fmt.Errorf("Redis %s, not %s*", version, prefix)
	}
	if minMajor > 0 {
		major, err := strconv.Atoi(strings.SplitN(version, ".", 2)[0])
		if err != nil || major < minMajor {
			return fmt.Errorf("Redis %s, older than %d: its tests would repeat the 6.0 run; name a Redis %d or later", version, minMajor, minMajor)
		}
	}
	return nil
}

// IsRedis60 reports whether t runs on the Redis 6.0 server of EachRedis.
func IsRedis60(t testing.TB) bool { return serverFor(t).Version == "6.0." }
