package executor_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// TestThumbnailLostLeasePublishesNothing: a render whose claim is lost
// while it runs (its lease expired, the row requeued and claimed again)
// renames nothing into the cache. At the moment named, the row is taken
// over by another claim, which publishes a picture of its own (as a newer
// row rendered from a newer version of the source would); the old render
// either sees its lease fenced (it waits for that) or reaches publish with
// the fence not yet fired, where the fenced write finds the row gone. In
// every case the newer picture stays, no temp file is left, and a Go render
// fenced after decoding stops before it encodes.
func TestThumbnailLostLeasePublishesNothing(t *testing.T) {
	cases := []struct {
		name   string
		format string // JPEG renders in Go, WebP through ffmpeg
		at     string // the render step at which the row is taken over
		fenced bool   // wait there until the heartbeat has fenced the render
	}{
		{"go: fenced between decode and encode", store.FormatJPEG, "decoded", true},
		{"go: fenced once rendered", store.FormatJPEG, "rendered", true},
		{"ffmpeg: fenced once rendered", store.FormatWebP, "rendered", true},
		{"go: taken over before the fence fires", store.FormatJPEG, "rendered", false},
		{"ffmpeg: taken over before the fence fires", store.FormatWebP, "rendered", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			src := filepath.Join(e.root, "p.jpg")
			writeJPEG(t, src, 64, 48)
			bin := t.TempDir()
			script := "#!/bin/sh\nfor a; do out=$a; done\ncp \"$SRC\" \"$out\"\n"
			if err := os.WriteFile(filepath.Join(bin, "ffmpeg"), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			t.Setenv("SRC", src)
			e.x.FFmpeg = filepath.Join(bin, "ffmpeg")
			e.x.FFprobe = filepath.Join(bin, "ffprobe") // absent: dimensions from the header
			e.scanAndHash()
			th := e.admit(src, c.format, 32)
			newer := filepath.Join(t.TempDir(), "newer.jpg")
			writeJPEG(t, newer, 8, 8)
			newerPic, _ := os.ReadFile(newer)
			// A short lease is fenced within a heartbeat (667 ms); under the
			// default one the first heartbeat comes long after the render.
			// Shorter, a busy machine could fence the render before the
			// step it is to be taken over at.
			if c.fenced {
				e.x.LeaseTTL = 2 * time.Second
			}

			var steps []string
			var taker *executor.ThumbTask
			executor.SetThumbStep(e.x, func(ctx context.Context, step string) {
				steps = append(steps, step)
				if step != c.at {
					return
				}
				if _, err := e.st.DB.Exec(`UPDATE thumbnails SET lease_expires_at = 0 WHERE id = ?`, th.ID); err != nil {
					t.Error(err)
					return
				}
				var err error
				if taker, err = e.x.ClaimThumbnail(context.Background()); err != nil || taker == nil || taker.ID != th.ID {
					t.Errorf("reclaim: %+v, %v", taker, err)
					return
				}
				if err := os.WriteFile(th.OutputPath, newerPic, 0o644); err != nil {
					t.Error(err)
				}
				if c.fenced {
					select {
					case <-ctx.Done():
					case <-time.After(10 * time.Second):
						t.Error("the render's lease was never fenced")
					}
				}
			})

			did, err := e.x.RunThumbnailOnce(context.Background())
			if !did || (err != nil && !errors.Is(err, lease.ErrStale)) {
				t.Fatalf("RunThumbnailOnce = %v, %v", did, err)
			}
			if taker == nil {
				t.Fatalf("the row was never taken over (steps %v)", steps)
			}
			if c.at == "decoded" && slices.Contains(steps, "rendered") {
				t.Fatalf("steps %v: the render went on to encode after its lease was fenced", steps)
			}
			if got, err := os.ReadFile(th.OutputPath); err != nil || !bytes.Equal(got, newerPic) {
				t.Fatalf("cache file (%d bytes, %v) is not the newer claim's picture: the lost render replaced it", len(got), err)
			}
			entries, err := os.ReadDir(filepath.Dir(th.OutputPath))
			if err != nil {
				t.Fatal(err)
			}
			for _, ent := range entries {
				if filepath.Join(filepath.Dir(th.OutputPath), ent.Name()) != filepath.Clean(th.OutputPath) {
					t.Errorf("left in the thumbnails directory: %s", ent.Name())
				}
			}
			var status, worker string
			e.st.DB.QueryRow(`SELECT status, worker_id FROM thumbnails WHERE id = ?`, th.ID).Scan(&status, &worker)
			if status != store.StatusRunning || worker != taker.Token {
				t.Fatalf("row %s held by %s, want still running under the newer claim %s", status, worker, taker.Token)
			}
		})
	}
}
