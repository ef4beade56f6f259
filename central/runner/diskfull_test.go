package runner_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// TestDiskFullIsRetryable: a runner whose temp root fills up has a local
// disk error (contract table: local_io, retryable), whether the download
// of the source or ffmpeg writing an output ran out of space. The job goes
// back to queued with its attempt counted, and the partial files are gone.
// Before, a full disk while downloading was recorded as storage_unreachable
// (the storage was blamed for the runner's disk), and while ffmpeg wrote
// as transcode_failed, permanent: the job failed for good because of the
// machine it ran on. It runs as root in a child test process inside a
// private mount namespace, on a 1 MiB tmpfs.
func TestDiskFullIsRetryable(t *testing.T) {
	testsvc.InMountNamespace(t, func(t *testing.T) {
		cases := []struct {
			name  string
			put   func(e *env)
			rends []inbox.Rendition
		}{
			// 2 MB of WAV cannot be downloaded to 1 MiB.
			{"source", func(e *env) { e.putWAV("in/src.wav", 10) }, oneOpus},
			// 576 kB of noise fits; flac of it at twice the rate in 8 channels (820 kB) does not.
			{"output", func(e *env) { e.putFile("in/src.wav", noiseWAV(t, 3)) },
				[]inbox.Rendition{{Name: "f", Codec: "flac", SampleRateHz: 96000, Channels: 8}}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				eachEngine(t, func(t *testing.T, e *env) {
					small := filepath.Join(t.TempDir(), "small")
					if err := os.Mkdir(small, 0o700); err != nil {
						t.Fatal(err)
					}
					if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=1m"); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = syscall.Unmount(small, syscall.MNT_DETACH) })
					e.tmp = small
					tc.put(e)
					id := e.enqueue("in/src.wav", tc.rends, nil)
					r := e.runner(func(s *runner.Settings) { s.TempDir = small })
					if ok, err := r.RunOnce(context.Background()); !ok || err != nil {
						t.Fatalf("RunOnce: %v %v", ok, err)
					}
					v := e.view(id)
					if v.Status != schema.StatusQueued || v.AttemptCount != 1 || v.LastError == nil || v.LastError.Code != "local_io" {
						t.Fatalf("status %s attempts %d err %+v; want queued, 1, local_io", v.Status, v.AttemptCount, v.LastError)
					}
					e.scratchEmpty()
				})
			})
		}
	})
}

// noiseWAV writes seconds of white noise, 48 kHz stereo PCM (which no
// encoder compresses much), and returns its path.
func noiseWAV(t *testing.T, seconds int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "noise.wav")
	out, err := exec.Command(testsvc.Program(t, "ffmpeg"), "-hide_banner", "-nostdin", "-loglevel", "error", "-y",
		"-f", "lavfi", "-i", "anoisesrc=a=0.5:r=48000:d="+strconv.Itoa(seconds), "-ac", "2", "-c:a", "pcm_s16le", path).CombinedOutput()
	if err != nil {
		t.Fatalf("noise: %v: %s", err, out)
	}
	return path
}
