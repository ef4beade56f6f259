package transcode_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/transcode"
	"github.com/vesta-cx/euterpe/central/transcode/transcodetest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// probeStream returns codec_name, sample_rate, channels of the first audio
// stream of path, read by the real ffprobe.
func probeStream(t *testing.T, path string) (string, int, int) {
	t.Helper()
	out, err := exec.Command(testsvc.Program(t, "ffprobe"), "-v", "error", "-select_streams", "a:0",
		"-show_entries", "stream=codec_name,sample_rate,channels", "-of", "csv=p=0", path).Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v", path, err)
	}
	f := strings.Split(strings.TrimSpace(string(out)), ",")
	if len(f) != 3 {
		t.Fatalf("ffprobe output %q", out)
	}
	rate, _ := strconv.Atoi(f[1])
	ch, _ := strconv.Atoi(f[2])
	return f[0], rate, ch
}

func TestTranscodeEveryCodec(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src.wav")
	transcodetest.WAV(t, src, 3, 44100, 2)
	tools := transcode.Tools{}
	info, err := tools.Probe(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	if info.Duration < 2900*time.Millisecond || info.Duration > 3100*time.Millisecond || info.Codec != "pcm_s16le" {
		t.Fatalf("probe = %+v", info)
	}
	cases := []struct {
		r        transcode.Rendition
		wantName string
		rate, ch int
	}{
		{transcode.Rendition{Name: "o", Codec: "opus", BitrateKbps: 96, SampleRate: 48000, Channels: 1}, "opus", 48000, 1},
		{transcode.Rendition{Name: "o-webm", Codec: "opus", Container: "webm"}, "opus", 48000, 2},
		{transcode.Rendition{Name: "a", Codec: "aac", BitrateKbps: 128, SampleRate: 32000, Channels: 2}, "aac", 32000, 2},
		{transcode.Rendition{Name: "a-adts", Codec: "aac", Container: "adts", Channels: 1}, "aac", 44100, 1},
		{transcode.Rendition{Name: "m", Codec: "mp3", BitrateKbps: 160, SampleRate: 22050, Channels: 1}, "mp3", 22050, 1},
		{transcode.Rendition{Name: "f", Codec: "flac", SampleRate: 96000}, "flac", 96000, 2},
	}
	for _, tc := range cases {
		t.Run(tc.r.Name, func(t *testing.T) {
			out := filepath.Join(dir, tc.r.FileName())
			var mu sync.Mutex
			var last transcode.Progress
			calls := 0
			d, err := tools.Transcode(context.Background(), tc.r, src, out, info.Duration, func(p transcode.Progress) {
				mu.Lock()
				defer mu.Unlock()
				last, calls = p, calls+1
			})
			if err != nil {
				t.Fatal(err)
			}
			if d < 2900*time.Millisecond || d > 3100*time.Millisecond {
				t.Fatalf("encoded duration %v", d)
			}
			if calls == 0 || last.Percent != 100 {
				t.Fatalf("progress calls=%d last=%+v, want a final 100%%", calls, last)
			}
			name, rate, ch := probeStream(t, out)
			if name != tc.wantName || rate != tc.rate || ch != tc.ch {
				t.Fatalf("output %s: got %s/%d/%d want %s/%d/%d", out, name, rate, ch, tc.wantName, tc.rate, tc.ch)
			}
		})
	}
}

func TestRenditionValidate(t *testing.T) {
	cases := []struct {
		r     transcode.Rendition
		field string // "" means valid
	}{
		{transcode.Rendition{Name: "ok", Codec: "opus", BitrateKbps: 128, SampleRate: 48000, Channels: 2}, ""},
		{transcode.Rendition{Name: "ok", Codec: "flac"}, ""},
		{transcode.Rendition{Name: "../x", Codec: "opus"}, "name"},
		{transcode.Rendition{Name: "", Codec: "opus"}, "name"},
		{transcode.Rendition{Name: "x", Codec: "vorbis"}, "codec"},
		{transcode.Rendition{Name: "x", Codec: "opus", BitrateKbps: 1000}, "bitrate_kbps"},
		{transcode.Rendition{Name: "x", Codec: "flac", BitrateKbps: 128}, "bitrate_kbps"},
		{transcode.Rendition{Name: "x", Codec: "opus", SampleRate: 44100}, "sample_rate"},
		{transcode.Rendition{Name: "x", Codec: "aac", SampleRate: 200000}, "sample_rate"},
		{transcode.Rendition{Name: "x", Codec: "mp3", Channels: 6}, "channels"},
		{transcode.Rendition{Name: "x", Codec: "mp3", Container: "ogg"}, "container"},
	}
	for _, tc := range cases {
		err := tc.r.Validate()
		var re *transcode.RenditionError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%+v: unexpected %v", tc.r, err)
		case tc.field != "" && (!errors.As(err, &re) || re.Field != tc.field):
			t.Errorf("%+v: got %v, want error on %s", tc.r, err, tc.field)
		}
	}
}

func TestFailures(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.wav")
	transcodetest.Garbage(t, garbage, 64<<10)
	silent := filepath.Join(dir, "video.nut")
	if out, err := exec.Command(testsvc.Program(t, "ffmpeg"), "-loglevel", "error", "-f", "lavfi", "-i", "color=c=black:s=32x32:d=1",
		"-c:v", "ffv1", silent).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	good := filepath.Join(dir, "good.wav")
	transcodetest.WAV(t, good, 1, 48000, 1)
	r := transcode.Rendition{Name: "o", Codec: "opus"}
	ctx := context.Background()
	cases := []struct {
		name string
		run  func() error
		want error
		code string
	}{
		{"probe garbage", func() error { _, err := transcode.Tools{}.Probe(ctx, garbage); return err }, transcode.ErrInvalidMedia, "invalid_media"},
		{"probe no audio", func() error { _, err := transcode.Tools{}.Probe(ctx, silent); return err }, transcode.ErrInvalidMedia, "invalid_media"},
		{"ffmpeg on garbage", func() error {
			_, err := transcode.Tools{}.Transcode(ctx, r, garbage, filepath.Join(dir, "x.ogg"), 0, nil)
			return err
		}, transcode.ErrFailed, "transcode_failed"},
		{"ffmpeg missing", func() error {
			_, err := transcode.Tools{FFmpeg: "ffmpeg-not-installed"}.Transcode(ctx, r, good, filepath.Join(dir, "y.ogg"), 0, nil)
			return err
		}, transcode.ErrMissing, "ffmpeg_missing"},
		{"ffprobe missing", func() error {
			_, err := transcode.Tools{FFprobe: "ffprobe-not-installed"}.Probe(ctx, good)
			return err
		}, transcode.ErrMissing, "ffmpeg_missing"},
		{"check missing", func() error { return transcode.Tools{FFmpeg: "ffmpeg-not-installed"}.Check(ctx) }, transcode.ErrMissing, "ffmpeg_missing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			if !errors.Is(err, tc.want) || transcode.Code(err) != tc.code {
				t.Fatalf("got %v (code %q), want %v (%s)", err, transcode.Code(err), tc.want, tc.code)
			}
		})
	}
}

// TestCancelKillsFFmpeg cancels a transcode on its first progress report and
// checks ffmpeg is gone well before it could have finished.
func TestCancelKillsFFmpeg(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "long.wav")
	transcodetest.WAV(t, src, 600, 48000, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := transcode.Rendition{Name: "slow", Codec: "flac", SampleRate: 192000}
	start := time.Now()
	_, err := transcode.Tools{}.Transcode(ctx, r, src, filepath.Join(dir, "slow.flac"), 600*time.Second, func(transcode.Progress) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cancel took %v", d)
	}
	if _, err := os.Stat(src); err != nil {
		t.Fatal(err)
	}
}

// TestSourceReadsNoOtherFile: ffmpeg picks a demuxer from the content, not
// the name, so a requester's source that is an HLS playlist or an ffconcat
// list would make ffprobe and ffmpeg read files of the runner's host (or
// fetch URLs) and encode them into the requester's output. Such a source
// must be refused as invalid media by both programs.
func TestSourceReadsNoOtherFile(t *testing.T) {
	testsvc.Program(t, "ffmpeg")
	dir := t.TempDir()
	// An extension the HLS demuxer accepts for a segment.
	secret := filepath.Join(t.TempDir(), "secret.mkv")
	transcodetest.WAV(t, secret, 2, 44100, 2)
	cases := []struct{ name, body string }{
		{"hls", "#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:2,\nfile:" + secret + "\n#EXT-X-ENDLIST\n"},
		{"hls plain path", "#EXTM3U\n#EXT-X-TARGETDURATION:10\n#EXTINF:2,\n" + secret + "\n#EXT-X-ENDLIST\n"},
		{"ffconcat", "ffconcat version 1.0\nfile '" + secret + "'\n"},
	}
	tools := transcode.Tools{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := filepath.Join(dir, "source")
			if err := os.WriteFile(src, []byte(c.body), 0o600); err != nil {
				t.Fatal(err)
			}
			if info, err := tools.Probe(context.Background(), src); !errors.Is(err, transcode.ErrInvalidMedia) {
				t.Errorf("Probe = %+v, %v; want ErrInvalidMedia", info, err)
			}
			out := filepath.Join(dir, "out.ogg")
			_ = os.Remove(out)
			r := transcode.Rendition{Name: "o", Codec: "opus"}
			if d, err := tools.Transcode(context.Background(), r, src, out, 0, nil); !errors.Is(err, transcode.ErrFailed) {
				t.Errorf("Transcode = %v, %v; want ErrFailed", d, err)
			}
		})
	}
}

// TestSourceContainers: the demuxer whitelist still reads the usual audio
// and audio-video containers.
func TestSourceContainers(t *testing.T) {
	ffmpeg := testsvc.Program(t, "ffmpeg")
	dir := t.TempDir()
	wav := filepath.Join(dir, "src.wav")
	transcodetest.WAV(t, wav, 1, 48000, 2)
	tools := transcode.Tools{}
	for _, ext := range []string{"wav", "mp3", "m4a", "mp4", "ogg", "opus", "flac", "mka", "webm", "aac", "aiff", "ts", "avi", "w64", "caf"} {
		t.Run(ext, func(t *testing.T) {
			src := filepath.Join(dir, "in."+ext)
			if out, err := exec.Command(ffmpeg, "-hide_banner", "-nostdin", "-loglevel", "error", "-y", "-i", wav, src).CombinedOutput(); err != nil {
				t.Fatalf("make %s: %v: %s", src, err, out)
			}
			// The runner's source has no extension: the demuxer is chosen by content.
			plain := filepath.Join(dir, "source-"+ext)
			if err := os.Rename(src, plain); err != nil {
				t.Fatal(err)
			}
			if _, err := tools.Probe(context.Background(), plain); err != nil {
				t.Fatalf("Probe: %v", err)
			}
			r := transcode.Rendition{Name: "o", Codec: "opus"}
			if _, err := tools.Transcode(context.Background(), r, plain, filepath.Join(dir, "out-"+ext+".ogg"), 0, nil); err != nil {
				t.Fatalf("Transcode: %v", err)
			}
		})
	}
}
