package executor_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// bombPNG is a PNG of a few dozen bytes whose header declares w×h 8-bit
// grey pixels; its image data is missing, so only a decoder that first
// allocates the whole picture gets anywhere near it.
func bombPNG(w, h uint32) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(typ string, data []byte) {
		binary.Write(&b, binary.BigEndian, uint32(len(data)))
		c := crc32.NewIEEE()
		c.Write([]byte(typ))
		c.Write(data)
		b.WriteString(typ)
		b.Write(data)
		binary.Write(&b, binary.BigEndian, c.Sum32())
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8] = 8 // bit depth; colour type 0 (grey), no interlace
	chunk("IHDR", ihdr)
	chunk("IEND", nil)
	return b.Bytes()
}

// TestThumbnailPixelLimit: a source whose declared dimensions exceed
// MaxPixels is refused with source_too_large before it is decoded, for
// Go-decoded images, images sent to ffmpeg (WebP output) and video frames
// (dimensions read by ffprobe); sources within the limit still render.
func TestThumbnailPixelLimit(t *testing.T) {
	type tc struct {
		name, file, format string
		make               func(t *testing.T, path string)
		maxPixels          int64
		want, code         string
	}
	writeBytes := func(b []byte) func(t *testing.T, path string) {
		return func(t *testing.T, path string) {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	jpg := func(w, h int) func(t *testing.T, path string) {
		return func(t *testing.T, path string) { writeJPEG(t, path, w, h) }
	}
	cases := []tc{
		{name: "declared 12000x12000 PNG (144 MP) over the default", file: "big.png", format: store.FormatJPEG,
			make: writeBytes(bombPNG(12000, 12000)), want: store.StatusFailed, code: executor.CodeSourceTooLarge},
		{name: "declared 60000x60000 PNG", file: "bomb.png", format: store.FormatJPEG,
			make: writeBytes(bombPNG(60000, 60000)), want: store.StatusFailed, code: executor.CodeSourceTooLarge},
		{name: "JPEG over a lowered limit", file: "p.jpg", format: store.FormatJPEG, make: jpg(400, 300),
			maxPixels: 100_000, want: store.StatusFailed, code: executor.CodeSourceTooLarge},
		{name: "JPEG at the limit renders", file: "p.jpg", format: store.FormatJPEG, make: jpg(400, 250),
			maxPixels: 100_000, want: store.StatusReady},
	}
	if _, err := exec.LookPath("ffmpeg"); err == nil || os.Getenv("CI") == "true" {
		ff := testsvc.Program(t, "ffmpeg")
		testsvc.Program(t, "ffprobe")
		video := func(size string) func(t *testing.T, path string) {
			return func(t *testing.T, path string) {
				out, err := exec.Command(ff, "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size="+size+":rate=10:duration=1",
					"-pix_fmt", "yuv420p", path).CombinedOutput()
				if err != nil {
					t.Fatalf("make video: %v %s", err, out)
				}
			}
		}
		cases = append(cases,
			tc{name: "declared bomb PNG to WebP through ffmpeg", file: "bomb.png", format: store.FormatWebP,
				make: writeBytes(bombPNG(60000, 60000)), want: store.StatusFailed, code: executor.CodeSourceTooLarge},
			tc{name: "video frame over the limit", file: "v.mp4", format: store.FormatJPEG, make: video("640x480"),
				maxPixels: 100_000, want: store.StatusFailed, code: executor.CodeSourceTooLarge},
			tc{name: "video frame within the limit renders", file: "v.mp4", format: store.FormatWebP, make: video("320x240"),
				maxPixels: 100_000, want: store.StatusReady},
		)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, true)
			e.x.IOBytesPerSec = 0
			if c.maxPixels > 0 {
				e.x.MaxPixels = c.maxPixels
			}
			src := filepath.Join(e.root, c.file)
			c.make(t, src)
			e.scanAndHash()
			th := e.admit(src, c.format, 64)
			if did, err := e.x.RunThumbnailOnce(context.Background()); !did || err != nil {
				t.Fatalf("did=%v err=%v", did, err)
			}
			status, code, _, _ := e.thumbStatus(th.ID)
			if status != c.want || code != c.code {
				t.Fatalf("thumbnail %s %s, want %s %s", status, code, c.want, c.code)
			}
			if c.code == executor.CodeSourceTooLarge {
				var msg string
				e.st.DB.QueryRow(`SELECT error_message FROM thumbnails WHERE id = ?`, th.ID).Scan(&msg)
				if !strings.Contains(msg, "pixels") {
					t.Fatalf("error message %q does not name the limit", msg)
				}
			}
		})
	}
}

// TestThumbnailFFmpegMaxPixelsWithoutProbe: with no ffprobe to read a
// video's dimensions first, ffmpeg's own decoder limit (-max_pixels) still
// refuses the oversized frame, recorded as source_too_large.
func TestThumbnailFFmpegMaxPixelsWithoutProbe(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil && os.Getenv("CI") != "true" {
		t.Skip("ffmpeg not installed")
	}
	ff := testsvc.Program(t, "ffmpeg")
	e := newEnv(t, true)
	e.x.IOBytesPerSec = 0
	e.x.MaxPixels = 100_000
	e.x.FFprobe = filepath.Join(t.TempDir(), "no-ffprobe")
	src := filepath.Join(e.root, "v.mp4")
	if out, err := exec.Command(ff, "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=640x480:rate=10:duration=1",
		"-pix_fmt", "yuv420p", src).CombinedOutput(); err != nil {
		t.Fatalf("make video: %v %s", err, out)
	}
	e.scanAndHash()
	th := e.admit(src, store.FormatJPEG, 64)
	if did, err := e.x.RunThumbnailOnce(context.Background()); !did || err != nil {
		t.Fatalf("did=%v err=%v", did, err)
	}
	if status, code, _, _ := e.thumbStatus(th.ID); status != store.StatusFailed || code != executor.CodeSourceTooLarge {
		t.Fatalf("thumbnail %s %s, want failed %s", status, code, executor.CodeSourceTooLarge)
	}
}
