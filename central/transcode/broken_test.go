package transcode_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/vesta-cx/euterpe/central/transcode"
	"github.com/vesta-cx/euterpe/central/transcode/transcodetest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// brokenProgram writes an executable file with content body and returns its
// path.
func brokenProgram(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "broken")
	if err := os.WriteFile(path, []byte(body), 0o700); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestBrokenPrograms: a program on PATH that cannot run is the machine's
// fault, like a missing one (ErrMissing, ffmpeg_missing), both when Check
// asks it for -version and when a job runs it. Without that, Check passed
// (the file was there) and each job failed for good: ffmpeg's exit 127 was
// transcode_failed, ffprobe's invalid_media.
func TestBrokenPrograms(t *testing.T) {
	testsvc.Program(t, "sh")
	testsvc.Program(t, "ffmpeg")
	dir := t.TempDir()
	src := filepath.Join(dir, "src.wav")
	transcodetest.WAV(t, src, 1, 48000, 1)
	r := transcode.Rendition{Name: "o", Codec: "opus"}
	ctx := context.Background()
	if err := (transcode.Tools{}).Check(ctx); err != nil {
		t.Fatalf("Check with working programs: %v", err)
	}
	programs := []struct{ name, body string }{
		{"shared library missing", "#!/bin/sh\necho \"$0: error while loading shared libraries: libmp3lame.so.0: cannot open shared object file\" >&2\nexit 127\n"},
		{"wrapper's command not executable", "#!/bin/sh\necho \"$0: 2: /opt/ffmpeg/bin/ffmpeg: Permission denied\" >&2\nexit 126\n"},
		{"not a program", "\x7fELF\x00garbage"},
	}
	for _, p := range programs {
		bin := brokenProgram(t, p.body)
		runs := []struct {
			name string
			run  func() error
		}{
			{"check ffmpeg", func() error { return transcode.Tools{FFmpeg: bin}.Check(ctx) }},
			{"check ffprobe", func() error { return transcode.Tools{FFprobe: bin}.Check(ctx) }},
			{"transcode", func() error {
				_, err := transcode.Tools{FFmpeg: bin}.Transcode(ctx, r, src, filepath.Join(dir, "o.ogg"), 0, nil)
				return err
			}},
			{"probe", func() error { _, err := transcode.Tools{FFprobe: bin}.Probe(ctx, src); return err }},
		}
		for _, run := range runs {
			t.Run(p.name+"/"+run.name, func(t *testing.T) {
				err := run.run()
				var be *transcode.BrokenError
				if !errors.Is(err, transcode.ErrMissing) || !errors.As(err, &be) || transcode.Code(err) != "ffmpeg_missing" {
					t.Fatalf("got %v (code %q), want a BrokenError, ffmpeg_missing", err, transcode.Code(err))
				}
			})
		}
	}
	// Check runs the programs: one that fails -version in any way fails it.
	bin := brokenProgram(t, "#!/bin/sh\necho 'Unrecognized option' >&2\nexit 1\n")
	if err := (transcode.Tools{FFmpeg: bin}).Check(ctx); !errors.Is(err, transcode.ErrMissing) {
		t.Fatalf("Check with an ffmpeg failing -version: %v", err)
	}
}
