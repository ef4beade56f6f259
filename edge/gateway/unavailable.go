package gateway

import (
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon"
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

func redisDown(err error) bool {
	var ne net.Error
	switch {
	case errors.As(err, &ne),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrClosed):
		return true
	}
	for _, prefix := range []string{"LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}
