package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// A job whose deltas cannot be written (here: the capture stream is at its
// cap and its drops record was overwritten with a string, so every delta
// is refused with ErrWrongType) still finishes with its whole result, and
// the failures are logged once when the first happens and once, counted,
// when the job ends: not a line for every delta of a long answer.
func TestRefusedDeltasAreLoggedOncePerJob(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		ctx := context.Background()
		rdb, st, _ := newRedis(t)
		st.Capture = jobs.CaptureStream
		st.CaptureMax = 1
		if err := rdb.Set(ctx, jobs.CaptureDrops, "written by hand", 0).Err(); err != nil {
			t.Fatal(err)
		}
		const flushes = 6
		be := backend.NewRegistry(map[string]backend.Backend{"chat": backend.Func(func(ctx context.Context, r backend.Request, delta backend.Delta) (json.RawMessage, error) {
			for i := range flushes {
				delta(strings.Repeat("x", i+1))
				time.Sleep(80 * time.Millisecond) // past DeltaInterval: each is a write of its own
			}
			return json.RawMessage(`{"text":"done"}`), nil
		})})
		var logs testsvc.LogBuffer
		p, err := New(slog.New(slog.NewJSONHandler(&logs, nil)), rdb, st, "w", testSettings(), be)
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- p.Run(runCtx) }()
		defer func() { cancel(); <-done }()

		id := create(t, st, "chat", `{}`)
		if j := waitTerminal(t, st, id, 10*time.Second); j.Status != jobs.Done {
			t.Fatalf("status %s, want done", j.Status)
		}
		deadline := time.Now().Add(2 * time.Second)
		for !strings.Contains(logs.String(), `"failed"`) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		var lines []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "write delta") {
				lines = append(lines, l)
			}
		}
		if len(lines) != 2 {
			t.Fatalf("%d write-delta lines, want 2 (the first failure, then the count):\n%s", len(lines), strings.Join(lines, "\n"))
		}
		if !strings.Contains(lines[0], jobs.ErrWrongType.Error()) || !strings.Contains(lines[1], `"failed":`) {
			t.Fatalf("lines:\n%s", strings.Join(lines, "\n"))
		}
	})
}
