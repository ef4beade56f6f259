package executor_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// A thumbnail row whose output path is inside the cache only once cleaned
// — a ".." after a symlink leading out of it — is written at the path that
// was checked: renaming onto the raw path would let the kernel follow the
// symlink first and replace the original media file with a thumbnail.
func TestThumbnailWritesThePathItChecked(t *testing.T) {
	cases := []struct {
		name, format string
		ffmpeg       bool
	}{
		{"jpeg rendered in Go", store.FormatJPEG, false},
		{"webp rendered by ffmpeg", store.FormatWebP, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			if c.ffmpeg {
				e.x.FFmpeg = testsvc.Program(t, "ffmpeg")
			}
			ctx := context.Background()
			a := filepath.Join(e.root, "a.jpg")
			writeJPEG(t, a, 40, 30)
			original, _ := os.ReadFile(a)
			sub := filepath.Join(e.root, "sub")
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			e.scanAndHash()
			thumbs := e.x.Thumbs.Path()
			if err := os.Symlink(sub, filepath.Join(thumbs, "escape")); err != nil {
				t.Fatal(err)
			}
			hostile := filepath.Join(thumbs, "escape") + "/../a.jpg" // cleaned: <thumbs>/a.jpg
			var id int64
			if err := e.st.DB.QueryRow(`INSERT INTO thumbnails(file_id, source_path, output_path, status, media_type, format, max_size)
VALUES (?, ?, ?, 'pending', 'image', ?, 16) RETURNING id`, e.file(a).ID, a, hostile, c.format).Scan(&id); err != nil {
				t.Fatal(err)
			}
			if did, err := e.x.RunThumbnailOnce(ctx); !did || err != nil {
				t.Fatalf("RunThumbnailOnce did=%v err=%v", did, err)
			}
			if now, _ := os.ReadFile(a); !bytes.Equal(now, original) {
				t.Fatalf("original %s overwritten through %s", a, hostile)
			}
			status, code, _, _ := e.thumbStatus(id)
			if status != store.StatusReady {
				t.Fatalf("thumbnail %s %s, want ready at the checked path", status, code)
			}
			if _, err := os.Stat(filepath.Join(thumbs, "a.jpg")); err != nil {
				t.Fatalf("thumbnail not at the checked path: %v", err)
			}
		})
	}
}

// A catalogued file replaced by a FIFO (mkfifo at its path) is refused by
// the hash job and the thumbnail renderer alike; opening it for reading
// would wait for a writer for ever, and a hash job stuck so keeps its lease
// and with it the single scan/hash slot, so no scan would run again.
func TestFIFOInPlaceOfCataloguedFile(t *testing.T) {
	cases := []struct {
		name string
		run  func(e *env, path string) error
	}{
		{"hash job", func(e *env, path string) error {
			if _, err := e.p.EnqueueHash(context.Background()); err != nil {
				return err
			}
			if j := e.runJob(); j.Status != store.StatusCompleted {
				e.t.Errorf("hash job %s: %s", j.Status, deref(j.ErrorMessage))
			}
			return nil
		}},
		{"thumbnail", func(e *env, path string) error {
			th := e.admit(path, store.FormatJPEG, 16)
			if _, err := e.x.RunThumbnailOnce(context.Background()); err != nil {
				return err
			}
			if status, code, _, _ := e.thumbStatus(th.ID); status != store.StatusFailed {
				e.t.Errorf("thumbnail %s %s, want failed", status, code)
			}
			return nil
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, false)
			path := filepath.Join(e.root, "p.jpg")
			writeJPEG(t, path, 20, 20)
			if _, err := e.p.EnqueueScan(context.Background()); err != nil {
				t.Fatal(err)
			}
			if j := e.runJob(); j.Status != store.StatusCompleted {
				t.Fatalf("scan %s", j.Status)
			}
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- c.run(e, path) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				// Give the blocked open its writer so the test can end.
				if w, err := os.OpenFile(path, os.O_WRONLY, 0); err == nil {
					w.Close()
				}
				<-done
				t.Fatalf("%s blocked on a FIFO", c.name)
			}
		})
	}
}

// A library file that is a playlist (HLS, which ffmpeg recognises by its
// content whatever the file is named) would have ffmpeg and ffprobe open
// what it names: a video outside every root, or any URL. The thumbnail is
// refused instead of showing a frame of a file the library does not hold.
func TestThumbnailFFmpegReadsOnlyItsSource(t *testing.T) {
	ff := testsvc.Program(t, "ffmpeg")
	cases := []struct {
		name, file, format string
	}{
		{"video as jpeg", "playlist.mp4", store.FormatJPEG},
		{"video as webp", "playlist.mkv", store.FormatWebP},
		{"image as webp", "playlist.png", store.FormatWebP},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			e.x.FFmpeg = ff
			secret := filepath.Join(e.outside, "secret.mp4")
			out, err := exec.Command(ff, "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=10:duration=2",
				"-pix_fmt", "yuv420p", secret).CombinedOutput()
			if err != nil {
				t.Fatalf("make video: %v: %s", err, out)
			}
			playlist := e.write(c.file, "#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:10,\n"+secret+"\n#EXT-X-ENDLIST\n")
			e.scanAndHash()
			th := e.admit(playlist, c.format, 64)
			if did, err := e.x.RunThumbnailOnce(context.Background()); !did || err != nil {
				t.Fatalf("RunThumbnailOnce did=%v err=%v", did, err)
			}
			status, code, w, h := e.thumbStatus(th.ID)
			if status != store.StatusFailed {
				t.Fatalf("thumbnail %s %s (%dx%d): rendered from %s, outside every root", status, code, w, h, secret)
			}
			var msg string
			e.st.DB.QueryRow(`SELECT error_message FROM thumbnails WHERE id = ?`, th.ID).Scan(&msg)
			if len(msg) > 512 {
				t.Fatalf("error message of %d characters", len(msg))
			}
		})
	}
}
