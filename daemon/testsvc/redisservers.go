package testsvc

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
}

// RedisServers are the servers EachRedis runs on, default first.
func RedisServers() []RedisServer {
	return []RedisServer{
		{Name: "redis", URL: RedisURL(), Env: "EUTERPE_TEST_REDIS_URL"},
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

// checkVersion fails t when srv must be a given version and is not.
func checkVersion(t testing.TB, srv RedisServer, c *redis.Client) {
	if srv.Version == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		t.Fatalf("%s INFO server: %v", srv.Name, err)
	}
	if !strings.Contains(info, "redis_version:"+srv.Version) {
		t.Fatalf("%s at %s (%s) is not Redis %s*", srv.Name, srv.URL, srv.Env, srv.Version)
	}
}

// IsRedis60 reports whether t runs on the Redis 6.0 server of EachRedis.
func IsRedis60(t testing.TB) bool { return serverFor(t).Version == "6.0." }
