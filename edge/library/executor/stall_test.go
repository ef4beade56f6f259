package executor_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// A hash job whose read hangs (a disk pulled out, a network filesystem's
// server gone: the read blocks in the kernel and nothing can interrupt it)
// keeps its lease; the log names the file it is stuck on, once, and says
// when the job moves on.
func TestHungHashReadIsLogged(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	logs := &testsvc.LogBuffer{}
	e.x.Log = slog.New(slog.NewJSONHandler(logs, nil))
	e.x.StallWarn = 200 * time.Millisecond
	stuck := e.write("stuck.flac", "audio")
	if _, err := e.p.EnqueueScan(ctx); err != nil {
		t.Fatal(err)
	}
	e.runJob()
	if _, err := e.p.EnqueueHash(ctx); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	executor.SetHashChunk(e.x, func(int64) { <-release })
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(logs.String(), "made no progress") && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond) // a warning is not repeated while stuck
		close(release)
	}()
	if j := e.runJob(); j.Status != store.StatusCompleted {
		t.Fatalf("hash job %s", j.Status)
	}
	out := logs.String()
	if n := strings.Count(out, "made no progress"); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, filepath.Base(stuck)) {
		t.Errorf("the warning does not name %s:\n%s", stuck, out)
	}
}
