package transcode_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/transcode"
	"github.com/vesta-cx/euterpe/central/transcode/transcodetest"
	"github.com/vesta-cx/euterpe/daemon/procgroup/proctest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// holdingWrapper writes a program that starts a child in a session of its
// own (setsid: out of reach of the kill of the program's group) holding
// its stdout and stderr, the child's pid in pidFile, then runs then (the
// script's last line).
func holdingWrapper(t *testing.T, then string) (program, pidFile string) {
	t.Helper()
	dir := t.TempDir()
	program, pidFile = filepath.Join(dir, "wrapped"), filepath.Join(dir, "pid")
	// The child records its pid once in its own session, and the wrapper
	// waits for that: exiting sooner, it would have the child killed with
	// its group.
	script := "#!/bin/sh\nsetsid sh -c 'echo $$ > " + pidFile + ".tmp; mv " + pidFile + ".tmp " + pidFile + "; exec sleep 600' &\n" +
		"while [ ! -f " + pidFile + " ]; do sleep 0.01; done\n" + then + "\n"
	if err := os.WriteFile(program, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b, _ := os.ReadFile(pidFile)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return program, pidFile
}

// TestOutputHeldAfterTheProgramExited: ffmpeg or ffprobe exits 0 while
// something it started outside its process group (a wrapper's daemonised
// child) still holds its stdout and stderr. When the program completed
// what it was asked for (ffmpeg reported the end of its output, ffprobe
// answered a whole document), the call succeeds and a warning names the
// leftover holder; when it did not, the call fails with ErrOutputHeld,
// never with os/exec's bare "WaitDelay expired".
func TestOutputHeldAfterTheProgramExited(t *testing.T) {
	ffmpeg, ffprobe := testsvc.Program(t, "ffmpeg"), testsvc.Program(t, "ffprobe")
	dir := t.TempDir()
	src := filepath.Join(dir, "short.wav")
	transcodetest.WAV(t, src, 1, 48000, 2)
	transcodeWith := func(tools transcode.Tools, out string) error {
		r := transcode.Rendition{Name: "voice", Codec: "flac", SampleRate: 48000}
		d, err := tools.Transcode(context.Background(), r, src, out, 0, nil)
		if err == nil && (d < 900*time.Millisecond || d > 1100*time.Millisecond) {
			return errors.New("encoded duration " + d.String())
		}
		return err
	}
	probeWith := func(tools transcode.Tools, _ string) error {
		info, err := tools.Probe(context.Background(), src)
		if err == nil && info.Codec != "pcm_s16le" {
			return errors.New("probed codec " + info.Codec)
		}
		return err
	}
	cases := []struct {
		name   string
		then   string // the wrapper's last line
		ffmpeg bool
		want   error // nil: success, with the warning logged
	}{
		{"ffmpeg completes", `exec "` + ffmpeg + `" "$@"`, true, nil},
		{"ffmpeg never ran", "exit 0", true, transcode.ErrOutputHeld},
		{"ffprobe answers", `exec "` + ffprobe + `" "$@"`, false, nil},
		{"ffprobe never ran", "exit 0", false, transcode.ErrOutputHeld},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			program, pidFile := holdingWrapper(t, tc.then)
			var logs bytes.Buffer
			tools := transcode.Tools{FFmpeg: program, FFprobe: program, Logger: slog.New(slog.NewTextHandler(&logs, nil))}
			run, out := probeWith, ""
			if tc.ffmpeg {
				run, out = transcodeWith, filepath.Join(t.TempDir(), "out.flac")
			}
			err := run(tools, out)
			holder := proctest.ReadPid(t, pidFile)
			if !proctest.Running(holder) {
				t.Fatalf("the holder was gone before the call returned (%v): nothing held the output", err)
			}
			if tc.want == nil {
				if err != nil {
					t.Fatalf("got %v, want success", err)
				}
				if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "outside its process group") {
					t.Fatalf("no warning naming the holder logged: %q", logs.String())
				}
				if out != "" {
					if fi, err := os.Stat(out); err != nil || fi.Size() == 0 {
						t.Fatalf("output: %v", err)
					}
				}
				return
			}
			if !errors.Is(err, tc.want) || transcode.Code(err) != "output_held" {
				t.Fatalf("got %v (code %q), want %v (output_held)", err, transcode.Code(err), tc.want)
			}
			if !strings.Contains(err.Error(), "outside its process group") {
				t.Fatalf("message %q does not name the holder", err)
			}
		})
	}
}
