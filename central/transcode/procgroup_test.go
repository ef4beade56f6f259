package transcode_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/transcode"
	"github.com/vesta-cx/euterpe/central/transcode/transcodetest"
	"github.com/vesta-cx/euterpe/daemon/procgroup/proctest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// wrapper writes a program that runs cmd as its own child (no exec), the
// way a site wrapper around ffmpeg (nice, ionice, a library path) does, and
// records the child's pid in pidFile.
func wrapper(t *testing.T, cmd string) (program, pidFile string) {
	t.Helper()
	dir := t.TempDir()
	program, pidFile = filepath.Join(dir, "wrapped"), filepath.Join(dir, "pid")
	script := "#!/bin/sh\n" + cmd + " &\necho $! > " + pidFile + ".tmp\nmv " + pidFile + ".tmp " + pidFile + "\nwait\n"
	if err := os.WriteFile(program, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return program, pidFile
}

// toolCase is one of the runner's two programs, run as program on src.
type toolCase struct {
	name string
	run  func(program string) error
}

// bothTools runs ffmpeg (a transcode of src into dir) and ffprobe (a probe
// of src) as a given program, for tests of what either program meets.
func bothTools(src, dir string) []toolCase {
	return []toolCase{
		{"ffmpeg", func(program string) error {
			r := transcode.Rendition{Name: "voice", Codec: "flac", SampleRate: 48000}
			_, err := transcode.Tools{FFmpeg: program}.Transcode(context.Background(), r, src, filepath.Join(dir, "out.flac"), 0, nil)
			return err
		}},
		{"ffprobe", func(program string) error {
			_, err := transcode.Tools{FFprobe: program}.Probe(context.Background(), src)
			return err
		}},
	}
}

// TestCancelKillsWrappedProgram: cancelling a transcode or a probe stops
// every process the configured program started, not only the program
// itself, and returns at once. A wrapper script that runs the real ffmpeg
// as its child is a common site setup; killing only the wrapper left the
// encoder running for a job the runner had given up (and Probe waiting on
// its open stdout).
func TestCancelKillsWrappedProgram(t *testing.T) {
	ffmpeg := testsvc.Program(t, "ffmpeg")
	dir := t.TempDir()
	src := filepath.Join(dir, "long.wav")
	transcodetest.WAV(t, src, 600, 48000, 2)
	cases := []struct {
		name string
		cmd  string
		run  func(ctx context.Context, program string) error
	}{
		{"ffmpeg", `"` + ffmpeg + `" "$@"`, func(ctx context.Context, program string) error {
			r := transcode.Rendition{Name: "slow", Codec: "flac", SampleRate: 192000}
			_, err := transcode.Tools{FFmpeg: program}.Transcode(ctx, r, src, filepath.Join(dir, "slow.flac"), 0, nil)
			return err
		}},
		{"ffprobe", "sleep 300", func(ctx context.Context, program string) error {
			_, err := transcode.Tools{FFprobe: program}.Probe(ctx, src)
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			program, pidFile := wrapper(t, tc.cmd)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			res := make(chan error, 1)
			go func() { res <- tc.run(ctx, program) }()
			child := proctest.ReadPid(t, pidFile)
			t.Cleanup(func() {
				if p, err := os.FindProcess(child); err == nil {
					_ = p.Kill()
				}
			})
			time.Sleep(200 * time.Millisecond) // let it get going
			start := time.Now()
			cancel()
			select {
			case err := <-res:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("got %v, want context.Canceled", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("not returned 10 s after cancel")
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("returned %v after cancel", d)
			}
			proctest.RequireGone(t, "the wrapped "+tc.name+"'s child", child, time.Second)
		})
	}
}

// TestProgramsGetNoSecrets: ffmpeg and ffprobe parse media a requester
// supplied, so they are started without the runner's secrets (the keyring,
// the database URL, tokens, cloud credentials); the rest of the
// environment, which a site wrapper may rely on, is kept.
func TestProgramsGetNoSecrets(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "short.wav")
	transcodetest.WAV(t, src, 1, 48000, 2)
	t.Setenv("EUTERPE_KEYRING", "k1:planted-keyring-secret")
	t.Setenv("PGPASSWORD", "planted-db-password")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "planted-cloud-secret")
	t.Setenv("EUTERPE_SITE_NOTE", "planted-euterpe-setting")
	t.Setenv("FFREPORT_KEPT", "kept-for-the-wrapper")
	cases := bothTools(src, dir)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			real := testsvc.Program(t, tc.name)
			envFile := filepath.Join(t.TempDir(), "env")
			program := filepath.Join(t.TempDir(), "wrapped")
			script := "#!/bin/sh\nenv > " + envFile + "\nexec \"" + real + "\" \"$@\"\n"
			if err := os.WriteFile(program, []byte(script), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := tc.run(program); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(envFile)
			if err != nil {
				t.Fatal(err)
			}
			env := string(b)
			for _, s := range []string{"planted-keyring-secret", "planted-db-password", "planted-cloud-secret", "planted-euterpe-setting"} {
				if strings.Contains(env, s) {
					t.Errorf("%s reached the program's environment", s)
				}
			}
			if !strings.Contains(env, "FFREPORT_KEPT=kept-for-the-wrapper") || !strings.Contains(env, "PATH=") {
				t.Errorf("the rest of the environment was not kept:\n%s", env)
			}
		})
	}
}

// TestProgramExitsLeavingItsChild: a wrapped ffmpeg or ffprobe that exits
// while something it started still holds its output open does not hold the
// transcode or the probe: what is left of its group is killed as soon as
// it exits, and the call returns.
func TestProgramExitsLeavingItsChild(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "short.wav")
	transcodetest.WAV(t, src, 1, 48000, 2)
	cases := bothTools(src, dir)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			program, pidFile := wrapper(t, "sleep 600")
			// The wrapper's last line waits for its child; exit instead.
			b, err := os.ReadFile(program)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(program, []byte(strings.TrimSuffix(string(b), "wait\n")+"exit 0\n"), 0o700); err != nil {
				t.Fatal(err)
			}
			res := make(chan error, 1)
			go func() { res <- tc.run(program) }()
			child := proctest.ReadPid(t, pidFile)
			t.Cleanup(func() {
				if p, err := os.FindProcess(child); err == nil {
					_ = p.Kill()
				}
			})
			select {
			case <-res: // what it says of empty output is not the point
			case <-time.After(10 * time.Second):
				t.Fatal("not returned 10 s after the program exited")
			}
			proctest.RequireGone(t, "the "+tc.name+"'s child", child, 5*time.Second)
		})
	}
}

// A line of progress output longer than the reader takes ends the parsing
// (readProgress), not the reading,
// not the transcode: the rest of the output is drained, so a program that
// goes on writing (1 MiB here, well past a pipe's buffer) is not blocked
// on a full pipe until the job times out.
func TestOverlongProgressLineDoesNotBlockTheProgram(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "in.wav")
	transcodetest.WAV(t, src, 1, 8000, 1)
	program := filepath.Join(dir, "chatty")
	script := "#!/bin/sh\nhead -c 200000 /dev/zero | tr '\\0' x\necho\nhead -c 1048576 /dev/zero | tr '\\0' 'y'\necho\necho progress=end\n: > \"$(eval echo \\${$#})\"\n"
	if err := os.WriteFile(program, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r := transcode.Rendition{Name: "o", Codec: "flac"}
	start := time.Now()
	_, err := transcode.Tools{FFmpeg: program}.Transcode(ctx, r, src, filepath.Join(dir, "out.flac"), 0, nil)
	if ctx.Err() != nil {
		t.Fatalf("transcode still blocked after %s: %v", time.Since(start), err)
	}
	if err != nil {
		t.Fatalf("transcode: %v", err)
	}
}
