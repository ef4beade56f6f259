package testsvc

import (
	"context"
	"strings"
	"testing"
)

// Redis(t) inside EachRedis, at any depth, opens the subtest's server; the
// 6.0 server really is Redis 6.0.
func TestEachRedisBindsServer(t *testing.T) {
	var ran []string
	EachRedis(t, func(t *testing.T) {
		ran = append(ran, t.Name())
		t.Run("nested", func(t *testing.T) {
			rdb, _ := Redis(t)
			info := rdb.Info(context.Background(), "server").Val()
			six := strings.Contains(info, "redis_version:6.0.")
			if six != IsRedis60(t) {
				t.Fatalf("IsRedis60 %v, server says %q", IsRedis60(t), info[:min(len(info), 200)])
			}
			if strings.HasSuffix(t.Name(), "redis6.0/nested") && !six {
				t.Fatal("the redis6.0 subtest did not run on Redis 6.0")
			}
		})
	})
	if len(ran) == 0 {
		t.Fatal("no server ran")
	}
	if serverFor(t).Name != "redis" {
		t.Fatalf("outside EachRedis: %+v", serverFor(t))
	}
}

func TestVersionFits(t *testing.T) {
	for _, c := range []struct {
		info, prefix string
		minMajor     int
		ok           bool
	}{
		{"# Server\r\nredis_version:7.2.4\r\nredis_mode:standalone\r\n", "", 7, true},
		{"# Server\r\nredis_version:6.0.16\r\n", "", 7, false},
		{"# Server\r\nredis_version:6.2.14\r\n", "", 7, false},
		{"# Server\r\nredis_version:10.0.0\r\n", "", 7, true},
		{"# Server\r\nredis_version:6.0.16\r\n", "6.0.", 0, true},
		{"# Server\r\nredis_version:7.0.0\r\n", "6.0.", 0, false},
		{"# Server\r\n", "", 7, false},
	} {
		if err := versionFits(c.info, c.prefix, c.minMajor); (err == nil) != c.ok {
			t.Errorf("versionFits(%q, %q, %d) = %v", c.info, c.prefix, c.minMajor, err)
		}
	}
}
