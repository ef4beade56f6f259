package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/edge/library/store"
)

// TestThumbnailToolFloodsStderr: what ffmpeg or ffprobe prints is kept
// for the error message only up to a bound. A hostile or corrupt source
// can make the decoder print errors for as long as the thumbnail timeout
// lasts; that must not grow the daemon's memory with it.
func TestThumbnailToolFloodsStderr(t *testing.T) {
	const flood = 16 << 20
	spew := "head -c " + strconv.Itoa(flood) + " /dev/zero | tr '\\0' e >&2\nexit 1"
	cases := []struct {
		name, file, format string
		ffmpeg, ffprobe    string
	}{
		{"ffmpeg", "p.jpg", store.FormatWebP, spew, "exit 1"},
		{"ffprobe", "v.mp4", store.FormatJPEG, "exit 1", spew},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			bin := t.TempDir()
			for name, body := range map[string]string{"ffmpeg": c.ffmpeg, "ffprobe": c.ffprobe} {
				if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			e.x.FFmpeg, e.x.FFprobe = filepath.Join(bin, "ffmpeg"), filepath.Join(bin, "ffprobe")
			src := filepath.Join(e.root, c.file)
			if strings.HasSuffix(c.file, ".jpg") {
				writeJPEG(t, src, 64, 48)
			} else {
				e.write(c.file, "not really a video")
			}
			e.scanAndHash()
			th := e.admit(src, c.format, 32)

			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			if _, err := e.x.RunThumbnailOnce(context.Background()); err != nil {
				t.Fatalf("RunThumbnailOnce: %v", err)
			}
			runtime.ReadMemStats(&after)
			var status string
			e.st.DB.QueryRow(`SELECT status FROM thumbnails WHERE id = ?`, th.ID).Scan(&status)
			if status != store.StatusFailed {
				t.Fatalf("thumbnail %s, want failed", status)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > flood/2 {
				t.Fatalf("%d MiB allocated for a %s that printed %d MiB", grew>>20, c.name, flood>>20)
			}
		})
	}
}
