package gateway

import (
	"errors"
	"fmt"
	"testing"
)

// redisError is what go-redis returns for an error reply.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}

// A restarted Redis answers LOADING until its AOF is read: the window the
// chaos run found answered 500. Those replies, and only those kinds of
// replies, mean "retry later".
func TestRedisDownReplies(t *testing.T) {
	for _, tc := range []struct {
		err  error
		down bool
	}{
		{redisError("LOADING Redis is loading the dataset in memory"), true},
		{fmt.Errorf("create job: %w", redisError("LOADING Redis is loading the dataset in memory")), true},
		{redisError("MASTERDOWN Link with MASTER is down"), true},
		{redisError("NOSCRIPT No matching script"), false},
		{redisError("ERR wrong number of arguments"), false},
		{errors.New("job x -> done: invalid status transition"), false},
	} {
		if got := redisDown(tc.err); got != tc.down {
			t.Errorf("redisDown(%v) = %v, want %v", tc.err, got, tc.down)
		}
	}
}
