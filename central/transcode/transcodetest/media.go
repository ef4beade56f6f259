// Package transcodetest generates real media with ffmpeg for tests of the
// transcode path, so no binary fixtures live in the repository.
package transcodetest

import (
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// WAV writes a PCM WAV of a sine tone lasting seconds at rate Hz with
// channels channels to path, using the real ffmpeg.
func WAV(t testing.TB, path string, seconds float64, rate, channels int) {
	t.Helper()
	ffmpeg := testsvc.Program(t, "ffmpeg")
	cmd := exec.Command(ffmpeg, "-hide_banner", "-nostdin", "-loglevel", "error", "-y",
		"-f", "lavfi", "-i", "sine=frequency=440:sample_rate="+strconv.Itoa(rate)+":duration="+strconv.FormatFloat(seconds, 'f', 3, 64),
		"-ac", strconv.Itoa(channels), "-c:a", "pcm_s16le", path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("generate %s: %v: %s", path, err, out)
	}
}

// Garbage writes n bytes that no demuxer accepts as media.
func Garbage(t testing.TB, path string, n int) {
	t.Helper()
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
