package jobs_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// redisReply is an error reply as go-redis returns one.
type redisReply string

func (e redisReply) Error() string { return string(e) }
func (redisReply) RedisError()     {}

var _ redis.Error = redisReply("")

// What waiting mends, and only that: a worker waits these out before it
// writes a job's outcome, and the gateway answers them 503.
func TestUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", fmt.Errorf("job x -> done: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), true},
		{"connection reset", fmt.Errorf("wrapped: %w", syscall.ECONNRESET), true},
		{"connection closed by the server", fmt.Errorf("job x -> done: %w", io.EOF), true},
		{"pool exhausted", redis.ErrPoolTimeout, true},
		{"server loading its data", redisReply("LOADING Redis is loading the dataset in memory"), true},
		{"client closed", redis.ErrClosed, false},
		{"key of another type", fmt.Errorf("job x -> done: %w", &jobs.WrongTypeError{Key: jobs.CaptureStream, Type: "string"}), false},
		{"out of memory", redisReply("OOM command not allowed when used memory > 'maxmemory'."), false},
		{"shutdown", context.Canceled, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, jobs.Unreachable(tc.err))
		})
	}
}
