package runner

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/transcode"
)

// A check of the programs that hangs (an ffmpeg stuck on -version, on a
// hung disk say) does not hold up the next caller: /ready gets the last
// answer at once instead of waiting out the check's timeout.
func TestToolCheckAnswersWhileAnotherRuns(t *testing.T) {
	dir := t.TempDir()
	slow := filepath.Join(dir, "slow")
	prog := filepath.Join(dir, "ffmpeg")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\n[ -e "+slow+" ] && sleep 3\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := newToolCheck(transcode.Tools{FFmpeg: prog, FFprobe: prog}, 0) // every answer stale at once
	if err := c.check(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(slow, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.check(context.Background()) }()
	for deadline := time.Now().Add(5 * time.Second); len(c.run) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the slow check did not start")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	err := c.check(ctx)
	if took := time.Since(start); err != nil || took > time.Second {
		t.Fatalf("check while another runs: %v after %s, want the last answer at once", err, took)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
