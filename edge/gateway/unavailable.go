package gateway

import (
	"errors"
	"net/http"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// unavailable turns an error that only says Redis cannot answer right now
// (a refused or dropped connection, a full pool, a server still loading
// its AOF after a restart) into 503 redis_unavailable with Retry-After.
// A client then retries, with its Idempotency-Key, what a 500 would have
// told it had failed for good. Other errors pass through unchanged.
func unavailable(err error, retryAfter int) error {
	if err == nil || !redisDown(err) {
		return err
	}
	e := daemon.Errorf(http.StatusServiceUnavailable, "redis_unavailable", "the job store is unavailable; retry later")
	e.RetryAfter = retryAfter
	return e
}

// redisDown is jobs.Unreachable, and a closed client too: during shutdown
// a request still being answered is told to retry elsewhere or later.
func redisDown(err error) bool {
	return errors.Is(err, redis.ErrClosed) || jobs.Unreachable(err)
}
