package executor_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/edge/library/executor"
)

// An idle executor polls once per loop after a wake-up, then waits for the
// next poll or wake-up: the wake-up is spent, not passed round the loops
// for ever (which kept every loop claiming back to back, a core burned on
// an idle edge).
func TestWakeIsSpent(t *testing.T) {
	e := newEnv(t, false)
	e.x.Poll = time.Hour
	e.x.ThumbWorkers = 1
	var rounds atomic.Int64
	executor.SetPolled(e.x, func() { rounds.Add(1) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.x.Run(ctx) }()
	defer func() { cancel(); <-done }()

	const loops = 4 // jobs, cleanups, WAL, one thumbnail worker
	settle := func(what string, least, most int64) int64 {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for rounds.Load() < least && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond) // a spinning loop would add thousands here
		got := rounds.Load()
		if got < least || got > most {
			t.Fatalf("%s: %d rounds, want %d to %d", what, got, least, most)
		}
		return got
	}
	n := settle("start", loops, loops)
	e.x.Wake()
	n = settle("after a wake-up", n+loops, n+loops)
	// A loop may begin its round between the two, and take both.
	e.x.Wake()
	e.x.Wake()
	settle("after two quick wake-ups", n+loops, n+2*loops)
}
