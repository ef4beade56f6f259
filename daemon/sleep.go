package daemon

import (
	"context"
	"time"
)

// Sleep waits d and reports whether it did: a context that ends (a
// shutdown, a Ctrl-C) ends the wait at once rather than after it, and the
// caller learns it should stop.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
