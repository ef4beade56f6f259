package jobs

import (
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Unreachable reports whether err only says Redis cannot answer right now
// — a refused, dropped or timed-out connection, a full pool, a server
// still loading its data after a restart or without its master — which
// waiting mends. A closed client is not: nothing will answer it again.
// The gateway answers such errors 503 with Retry-After; a worker waits
// them out before it writes a job's outcome.
func Unreachable(err error) bool {
	var ne net.Error
	switch {
	case errors.Is(err, redis.ErrClosed):
		return false
	case errors.As(err, &ne),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, redis.ErrPoolTimeout):
		return true
	}
	for _, prefix := range []string{"LOADING", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}
