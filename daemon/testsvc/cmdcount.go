package testsvc

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// CommandCounter counts the commands a client sends that Match accepts
// (every command when Match is nil), pipelines and transactions included.
// Hook it into a client with AddHook; Match is called from the client's
// goroutines, so whatever it reads that a test changes must be safe for
// that (an atomic).
type CommandCounter struct {
	Match func(cmd redis.Cmder) bool
	n     atomic.Int64
}

// N is the number of commands counted so far.
func (c *CommandCounter) N() int64 { return c.n.Load() }

func (c *CommandCounter) count(cmd redis.Cmder) {
	if c.Match == nil || c.Match(cmd) {
		c.n.Add(1)
	}
}

// DialHook passes dials through (part of redis.Hook).
func (c *CommandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts each command (part of redis.Hook).
func (c *CommandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts each command of a pipeline or transaction
// (part of redis.Hook).
func (c *CommandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}
