package runner_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// TestOutsideKillIsRetryable: an ffmpeg or ffprobe killed by a signal the
// runner did not send — the kernel's OOM killer sends SIGKILL — failed for
// want of memory on this machine, not because of the media. The attempt
// fails retryable (transcode_killed): the job goes back to queued with its
// attempt counted, scratch removed. Before, it was transcode_failed or
// invalid_media, permanent, and the job failed for good. The programs are
// real processes killed from outside their own code (kill -9 $$); a shell
// wrapper whose ffmpeg child was killed exits 128+9 and counts the same.
func TestOutsideKillIsRetryable(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		killed := selfKiller(t, "kill -9 $$\n")
		wrapper := selfKiller(t, "sh -c 'kill -9 $$'\nexit $?\n")
		cases := []struct {
			name string
			set  func(s *runner.Settings)
		}{
			{"ffmpeg", func(s *runner.Settings) { s.FFmpeg = killed }},
			{"ffprobe", func(s *runner.Settings) { s.FFprobe = killed }},
			{"ffmpeg wrapper", func(s *runner.Settings) { s.FFmpeg = wrapper }},
		}
		e.putWAV("in/src.wav", 1)
		for _, tc := range cases {
			id := e.enqueue("in/src.wav", oneOpus, nil)
			if ok, err := e.runner(tc.set).RunOnce(context.Background()); !ok || err != nil {
				t.Fatalf("%s: RunOnce: %v %v", tc.name, ok, err)
			}
			v := e.view(id)
			if v.Status != schema.StatusQueued || v.AttemptCount != 1 || v.LastError == nil || v.LastError.Code != "transcode_killed" ||
				!strings.Contains(v.LastError.Message, "killed") {
				t.Errorf("%s: status %s attempts %d err %+v; want queued, 1, transcode_killed", tc.name, v.Status, v.AttemptCount, v.LastError)
				continue
			}
			e.scratchEmpty()
			// The retry, with programs that work, succeeds.
			if v := e.drive(e.runner(nil), id, 20*time.Second); v.Status != schema.StatusSucceeded || v.AttemptCount != 2 {
				t.Fatalf("%s: retry: status %s attempts %d err %+v", tc.name, v.Status, v.AttemptCount, v.LastError)
			}
		}
	})
}

// selfKiller writes a shell program standing in for ffmpeg or ffprobe
// that runs body and returns its path. Asked for -version (the runner's
// readiness check), it answers as a working program does.
func selfKiller(t *testing.T, body string) string {
	t.Helper()
	return standIn(t, answersVersion+body)
}

// answersVersion makes a stand-in program answer -version with status 0.
const answersVersion = "case \" $* \" in *' -version '*) echo 'stand-in version'; exit 0;; esac\n"

// standIn writes a shell program running body and returns its path.
func standIn(t *testing.T, body string) string {
	t.Helper()
	testsvc.Program(t, "sh")
	path := filepath.Join(t.TempDir(), "stand-in")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o700); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCrashBySignalIsTheMedias: ffmpeg or ffprobe crashing by a signal
// other than SIGKILL (SIGSEGV in a demuxer fed hostile media) fails the job
// as the media's fault, as a non-zero exit does: retrying it elsewhere
// would crash again.
func TestCrashBySignalIsTheMedias(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		crashed := selfKiller(t, "kill -11 $$\n")
		cases := []struct {
			name string
			set  func(s *runner.Settings)
			code string
		}{
			{"ffmpeg", func(s *runner.Settings) { s.FFmpeg = crashed }, "transcode_failed"},
			{"ffprobe", func(s *runner.Settings) { s.FFprobe = crashed }, "invalid_media"},
		}
		e.putWAV("in/src.wav", 1)
		for _, tc := range cases {
			id := e.enqueue("in/src.wav", oneOpus, nil)
			if ok, err := e.runner(tc.set).RunOnce(context.Background()); !ok || err != nil {
				t.Fatalf("%s: RunOnce: %v %v", tc.name, ok, err)
			}
			v := e.view(id)
			if v.Status != schema.StatusFailed || v.LastError == nil || v.LastError.Code != tc.code ||
				!strings.Contains(v.LastError.Message, "signal 11") {
				t.Errorf("%s: status %s err %+v; want failed, %s, naming signal 11", tc.name, v.Status, v.LastError, tc.code)
			}
			e.scratchEmpty()
		}
	})
}
