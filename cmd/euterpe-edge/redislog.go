package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/vesta-cx/euterpe/daemon"
)

// redisNotices hands go-redis's own notices (a pool that cannot dial, a
// connection dropped with unread data) to the daemon's logger. Left to
// go-redis they are plain-text lines on stderr between the JSON ones,
// which a log shipper cannot parse and the logger's redaction never sees.
type redisNotices struct{ log *slog.Logger }

func (n redisNotices) Printf(_ context.Context, format string, v ...any) {
	msg := strings.TrimPrefix(strings.TrimSpace(fmt.Sprintf(format, v...)), "redis: ")
	n.log.Warn("redis client", "detail", daemon.CapMessage(msg))
}

// logRedisNotices routes go-redis's notices to log. The setting is the
// library's, process-wide: the daemon makes it once, at start.
func logRedisNotices(log *slog.Logger) { redis.SetLogger(redisNotices{log: log}) }
