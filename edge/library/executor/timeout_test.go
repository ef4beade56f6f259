package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/procgroup/proctest"
	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// TestThumbnailRenderTimeout: an ffmpeg or ffprobe that never ends (a
// hostile or corrupt source, a stuck decoder) is killed after the
// thumbnail timeout together with anything it started, and the thumbnail
// fails render_timeout instead of holding its worker and renewing its lease
// for ever. No temp file is left in the cache.
func TestThumbnailRenderTimeout(t *testing.T) {
	const timeout = 500 * time.Millisecond
	cases := []struct {
		name, file, format string
		ffmpeg, ffprobe    string // script bodies; "" = not installed
		tool               string // named in the error message
	}{
		{name: "image to WebP, ffmpeg never ends", file: "p.jpg", format: store.FormatWebP,
			ffmpeg: "exec sleep 600", tool: "ffmpeg"},
		{name: "ffmpeg's child never ends, holding its stderr", file: "p.jpg", format: store.FormatWebP,
			ffmpeg: "sleep 600 &\necho $! > \"$PIDFILE\"\nwait", tool: "ffmpeg"},
		{name: "video frame, ffmpeg never ends", file: "v.mp4", format: store.FormatJPEG,
			ffmpeg: "exec sleep 600", tool: "ffmpeg"},
		{name: "video, ffprobe never ends", file: "v.mp4", format: store.FormatJPEG,
			ffmpeg: "exit 1", ffprobe: "sleep 600 &\necho $! > \"$PIDFILE\"\nwait", tool: "ffprobe"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			bin := t.TempDir()
			pidFile := filepath.Join(bin, "child.pid")
			t.Setenv("PIDFILE", pidFile)
			script := func(name, body string) string {
				p := filepath.Join(bin, name)
				if body == "" {
					return p // absent
				}
				if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
				return p
			}
			e.x.FFmpeg = script("ffmpeg", c.ffmpeg)
			e.x.FFprobe = script("ffprobe", c.ffprobe)
			e.x.ThumbTimeout = timeout
			t.Cleanup(func() { killPIDFile(pidFile) })

			src := filepath.Join(e.root, c.file)
			if strings.HasSuffix(c.file, ".jpg") {
				writeJPEG(t, src, 64, 48)
			} else {
				e.write(c.file, "not really a video")
			}
			e.scanAndHash()
			th := e.admit(src, c.format, 32)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				_, err := e.x.RunThumbnailOnce(ctx)
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("RunThumbnailOnce: %v", err)
				}
			case <-time.After(15 * time.Second):
				cancel()
				t.Fatalf("render still running after %s with a %s timeout", time.Since(start).Round(time.Millisecond), timeout)
			}
			var status, code, msg string
			e.st.DB.QueryRow(`SELECT status, COALESCE(error_code, ''), COALESCE(error_message, '') FROM thumbnails WHERE id = ?`, th.ID).
				Scan(&status, &code, &msg)
			if status != store.StatusFailed || code != executor.CodeRenderTimeout {
				t.Fatalf("thumbnail %s %s (%s), want failed %s", status, code, msg, executor.CodeRenderTimeout)
			}
			if !strings.Contains(msg, c.tool) || !strings.Contains(msg, timeout.String()) || !strings.Contains(msg, "EUTERPE_LIBRARY_THUMBNAIL_TIMEOUT") {
				t.Fatalf("error message %q does not name %s, the limit and its setting", msg, c.tool)
			}
			if pid := readPIDFile(pidFile); pid > 0 {
				proctest.RequireGone(t, "the process "+c.tool+" started", pid, 2*time.Second)
			}
			left, _ := filepath.Glob(filepath.Join(e.x.Thumbs.Path(), ".tmp-thumb-*"))
			if len(left) != 0 {
				t.Fatalf("temp files left in the cache: %v", left)
			}
		})
	}
}

func readPIDFile(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func killPIDFile(path string) {
	if pid := readPIDFile(path); pid > 0 {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}
