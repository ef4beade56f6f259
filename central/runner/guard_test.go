package runner_test

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// TestOutputGuardrail: for a source above the guardrail size, an output
// growing past 200 % of the source fails the job with output_too_large
// (no retry), and ffmpeg is stopped as soon as it passes the limit. The
// 1 GB threshold is lowered for the test: a small lossy source decoded to
// lossless 96 kHz FLAC grows far past twice its size.
func TestOutputGuardrail(t *testing.T) {
	defer runner.SetGuardThreshold(1)()
	eachEngine(t, func(t *testing.T, e *env) {
		src := filepath.Join(t.TempDir(), "noise.mp3")
		if out, err := exec.Command(testsvc.Program(t, "ffmpeg"), "-loglevel", "error", "-f", "lavfi", "-i",
			"anoisesrc=d=20:c=white:r=48000", "-ac", "2", "-c:a", "libmp3lame", "-b:a", "32k", src).CombinedOutput(); err != nil {
			t.Fatalf("%v %s", err, out)
		}
		size := e.putFile("in/noise.mp3", src)
		id := e.enqueue("in/noise.mp3", []inbox.Rendition{
			{Name: "small", Codec: "opus", BitrateKbps: 16}, // well under 200 %
			{Name: "huge", Codec: "flac", SampleRateHz: 96000, Channels: 2},
		}, nil)
		v := e.drive(e.runner(nil), id, 30*time.Second)
		if v.Status != schema.StatusFailed || v.AttemptCount != 1 || v.LastError.Code != "output_too_large" {
			t.Fatalf("source %d bytes: status %s attempts %d err %+v", size, v.Status, v.AttemptCount, v.LastError)
		}
		e.scratchEmpty()
	})
}

// TestOutputLimitThreshold: the §11 guardrail applies to sources above
// 1 GB (10^9 bytes, so a source between 1 GB and 1 GiB is capped too) and
// caps each output at 200 % of the source (an output of exactly twice the
// source passes); smaller sources have no cap.
func TestOutputLimitThreshold(t *testing.T) {
	const gb, gib = int64(1_000_000_000), int64(1) << 30
	for _, c := range []struct {
		src, want int64
	}{
		{0, 0},
		{gb, 0},
		{gb + 1, 2 * (gb + 1)},
		{gib, 2 * gib},
		{4 * gib, 8 * gib},
	} {
		if got := runner.OutputLimit(c.src); got != c.want {
			t.Errorf("source of %d bytes: each output capped at %d, want %d", c.src, got, c.want)
		}
	}
}
