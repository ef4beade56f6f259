package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// go-redis's own notice of a pool that cannot dial reaches the log as one
// JSON line at warn, through the logger's redaction: a password in the
// text is hidden.
func TestRedisNoticesAreJSONLines(t *testing.T) {
	logs := &testsvc.LogBuffer{}
	log, err := daemon.NewLogger(logs, "info")
	require.NoError(t, err)
	logRedisNotices(log)
	t.Cleanup(func() { logRedisNotices(slog.New(slog.NewTextHandler(io.Discard, nil))) })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	require.Error(t, c.Ping(context.Background()).Err())
	require.NoError(t, c.Close())
	redisNotices{log: log}.Printf(context.Background(), "redis: dial redis://:%s@%s", "hunter2", addr)

	var seen int
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), "not JSON: %s", line)
		assert.Equal(t, "WARN", rec["level"])
		assert.Equal(t, "redis client", rec["msg"])
		assert.NotContains(t, line, "hunter2")
		if strings.Contains(rec["detail"].(string), "failed to dial") {
			seen++
		}
	}
	assert.Positive(t, seen, "the pool's notice is logged: %s", logs)
}
