package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/edge/library/store"
)

// TestThumbnailRenderRenewsLease: a render that lasts several lease lengths
// keeps its row under lease by heartbeats while it generates (§4.3), so it
// finishes ready rather than being requeued as stale, and the heartbeat is
// persisted while the render runs.
func TestThumbnailRenderRenewsLease(t *testing.T) {
	e := newEnv(t, true)
	const ttl = time.Second // a heartbeat every 333 ms
	src := filepath.Join(e.root, "p.jpg")
	writeJPEG(t, src, 64, 48)
	// ffmpeg that runs until the test has looked at the row mid-render
	// (three lease lengths; 30 s at most), then writes a picture to its
	// last argument, the output.
	bin := t.TempDir()
	marker, release := filepath.Join(bin, "started"), filepath.Join(bin, "release")
	script := "#!/bin/sh\ntouch \"$MARKER\"\ni=0\nwhile [ ! -e \"$RELEASE\" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done\n" +
		"for a; do out=$a; done\ncp \"$SRC\" \"$out\"\n"
	if err := os.WriteFile(filepath.Join(bin, "ffmpeg"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SRC", src)
	t.Setenv("MARKER", marker)
	t.Setenv("RELEASE", release)
	t.Cleanup(func() { _ = os.WriteFile(release, nil, 0o644) }) // a failed test's render ends too
	e.x.FFmpeg = filepath.Join(bin, "ffmpeg")
	e.x.FFprobe = filepath.Join(bin, "ffprobe") // absent: dimensions from the header
	e.scanAndHash()
	th := e.admit(src, store.FormatWebP, 32)
	// Only the render runs under the short lease: the scan and hash before
	// it could outlast one on a loaded machine and lose their own.
	e.x.LeaseTTL = ttl

	done := make(chan error, 1)
	go func() {
		_, err := e.x.RunThumbnailOnce(context.Background())
		done <- err
	}()
	var started, lastBeat int64
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("ffmpeg never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.st.DB.QueryRow(`SELECT started_at FROM thumbnails WHERE id = ?`, th.ID).Scan(&started)
	time.Sleep(3 * ttl) // the claim's own lease is over by now
	var status string
	var lease *int64
	e.st.DB.QueryRow(`SELECT status, worker_heartbeat_at, lease_expires_at FROM thumbnails WHERE id = ?`, th.ID).Scan(&status, &lastBeat, &lease)
	if status != store.StatusRunning || lease == nil || lastBeat <= started || *lease <= time.Now().UnixMilli() {
		t.Fatalf("mid-render: status %s, heartbeat %d (claimed at %d), lease %v: the lease was not renewed", status, lastBeat, started, lease)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if status, code, w, _ := e.thumbStatus(th.ID); status != store.StatusReady || w == 0 {
		t.Fatalf("thumbnail %s %s after a render of three lease lengths, want ready", status, code)
	}
}
