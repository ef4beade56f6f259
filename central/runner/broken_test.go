package runner_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon"
)

// TestBrokenTranscoder: ffmpeg or ffprobe is on PATH but cannot run (a
// shared library missing after a partial upgrade: the loader exits 127; a
// wrapper whose command is not executable: 126; a file that is no program
// at all). That is the machine's fault, as a missing program is: /ready
// reports ffmpeg_missing and nothing is claimed, and a job held when the
// program broke is given back without spending an attempt. A program that
// answers -version but fails the job so makes the runner not ready all the
// same, so the job is not claimed, fetched and given back again in a loop.
// Fails without: /ready was ok (only PATH was looked at) and every job
// failed for good, transcode_failed or invalid_media.
func TestBrokenTranscoder(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		e.putWAV("in/src.wav", 1)
		notProgram := filepath.Join(t.TempDir(), "not-a-program")
		if err := os.WriteFile(notProgram, []byte("\x7fELF\x00garbage"), 0o700); err != nil {
			t.Fatal(err)
		}
		libMissing := standIn(t, "echo \"$0: error while loading shared libraries: libopus.so.0: cannot open shared object file\" >&2\nexit 127\n")
		notExecutable := standIn(t, "echo \"$0: 2: exec: /opt/ffmpeg/bin/ffprobe: Permission denied\" >&2\nexit 126\n")
		versionOnly := standIn(t, answersVersion+"echo \"$0: error while loading shared libraries: libopus.so.0\" >&2\nexit 127\n")
		cases := []struct {
			name        string
			set         func(s *runner.Settings)
			passesCheck bool // it answers -version
		}{
			{"ffmpeg's shared library missing", func(s *runner.Settings) { s.FFmpeg = libMissing }, false},
			{"ffprobe not executable", func(s *runner.Settings) { s.FFprobe = notExecutable }, false},
			{"ffmpeg not a program", func(s *runner.Settings) { s.FFmpeg = notProgram }, false},
			{"ffmpeg answers only -version", func(s *runner.Settings) { s.FFmpeg = versionOnly }, true},
		}
		for _, tc := range cases {
			id := e.enqueue("in/src.wav", oneOpus, nil)
			r := e.runner(tc.set)
			gets := e.proxy.Requests(http.MethodGet)
			if tc.passesCheck {
				if err := r.Check(ctx); err != nil {
					t.Fatalf("%s: Check: %v", tc.name, err)
				}
				if ok, err := r.RunOnce(ctx); !ok || err != nil {
					t.Fatalf("%s: RunOnce: %v %v", tc.name, ok, err)
				}
			} else {
				rep := daemon.Probe(ctx, 2*time.Second, r.Checks()...)
				if got := rep.Checks["ffmpeg"]; rep.Ready || !strings.HasPrefix(got, "error(ffmpeg_missing: ") {
					t.Fatalf("%s: /ready: ready=%v ffmpeg=%q", tc.name, rep.Ready, got)
				}
				if ok, err := r.RunOnce(ctx); ok || err != nil {
					t.Fatalf("%s: claimed with a broken program: %v %v", tc.name, ok, err)
				}
				// A job claimed before the program broke.
				jobs, err := e.inbox.Claim(ctx, "w", 1, 5*time.Second)
				if err != nil || len(jobs) != 1 {
					t.Fatalf("%s: claim: %v", tc.name, err)
				}
				r.Process(ctx, jobs[0])
			}
			v := e.view(id)
			if v.Status != schema.StatusQueued || v.AttemptCount != 0 || v.LastError == nil || v.LastError.Code != "ffmpeg_missing" ||
				!strings.Contains(v.LastError.Message, "cannot run") {
				t.Fatalf("%s: status %s attempts %d err %+v; want queued, 0, ffmpeg_missing", tc.name, v.Status, v.AttemptCount, v.LastError)
			}
			// Given back, the job is not taken again by the same runner.
			if err := r.Check(ctx); err == nil || !strings.HasPrefix(err.Error(), "ffmpeg_missing: ") {
				t.Fatalf("%s: Check after the job met the program: %v", tc.name, err)
			}
			if ok, err := r.RunOnce(ctx); ok || err != nil {
				t.Fatalf("%s: claimed again: %v %v", tc.name, ok, err)
			}
			if n := e.proxy.Requests(http.MethodGet) - gets; n != 1 {
				t.Fatalf("%s: the source was fetched %d times, want once", tc.name, n)
			}
			e.scratchEmpty()
			// With working programs the job runs, on its first attempt.
			if v := e.drive(e.runner(nil), id, 20*time.Second); v.Status != schema.StatusSucceeded || v.AttemptCount != 1 {
				t.Fatalf("%s: status %s attempts %d err %+v", tc.name, v.Status, v.AttemptCount, v.LastError)
			}
		}
	})
}

// TestTranscoderCheckKept: the readiness check starts ffmpeg and ffprobe,
// so its answer is kept for a while: /ready polled often and a claim every
// poll interval start each program once, not each time.
func TestTranscoderCheckKept(t *testing.T) {
	runs := filepath.Join(t.TempDir(), "runs")
	counting := standIn(t, "echo \"$*\" >> "+runs+"\n")
	s := runner.DefaultSettings()
	s.TempDir = t.TempDir()
	s.FFmpeg, s.FFprobe = counting, counting
	r, err := runner.New(runner.Options{Jobs: (*inbox.Store)(nil), Secrets: nilSecrets{}, Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for range 5 {
		if err := r.Check(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(got)), "\n"); len(lines) != 2 {
		t.Fatalf("5 checks ran the programs %d times (%q), want once each", len(lines), lines)
	}
}
