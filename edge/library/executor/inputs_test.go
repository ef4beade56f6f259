package executor_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// Known answers: BLAKE3 from the official test_vectors.json (input_len 0
// and 1; the input is the byte sequence 0, 1, 2, …) and the "abc" digest;
// SHA-256 from FIPS 180-2.
func TestHashKnownAnswers(t *testing.T) {
	cases := []struct {
		algo, input, want string
	}{
		{store.AlgoBLAKE3, "", "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"},
		{store.AlgoBLAKE3, "\x00", "2d3adedff11b61f14c886e35afa036736dcd87a74d27b5c1510225d0f592e213"},
		{store.AlgoBLAKE3, "abc", "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"},
		{store.AlgoSHA256, "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{store.AlgoSHA256, "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
	}
	for _, c := range cases {
		got, err := executor.HashReader(context.Background(), strings.NewReader(c.input), c.algo, nil)
		if err != nil || got != c.want {
			t.Errorf("%s(%q) = %s, %v; want %s", c.algo, c.input, got, err, c.want)
		}
	}
	// The same digest through a scan and a hash job.
	e := newEnv(t, true)
	a := e.write("abc.bin", "abc")
	e.scanAndHash()
	if f := e.file(a); f.HashAlgorithm == nil || *f.HashAlgorithm != store.AlgoBLAKE3 || *f.ContentHash != cases[2].want {
		t.Fatalf("blake3 job digest of abc: %+v", f)
	}
}

// TestMtimeOnlyChangeNeedsHash: a file whose size stays the same but whose
// mtime moves is queued for hashing again (and loses its old digest) on the
// next scan.
func TestMtimeOnlyChangeNeedsHash(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	p := e.write("song.flac", "same bytes")
	e.scanAndHash()
	before := e.file(p)
	if before.NeedsHash || before.ContentHash == nil {
		t.Fatalf("after hash: %+v", before)
	}
	later := time.Unix(0, before.MtimeNS).Add(90 * time.Second)
	if err := os.Chtimes(p, later, later); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.EnqueueScan(ctx); err != nil {
		t.Fatal(err)
	}
	if j := e.runJob(); j.Status != store.StatusCompleted {
		t.Fatalf("rescan %s", j.Status)
	}
	after := e.file(p)
	if !after.NeedsHash || after.ContentHash != nil || after.SizeBytes != before.SizeBytes || after.MtimeNS != later.UnixNano() {
		t.Fatalf("after mtime-only change: %+v", after)
	}
	var changed int64
	e.st.DB.QueryRow(`SELECT files_changed FROM scan_sessions ORDER BY id DESC LIMIT 1`).Scan(&changed)
	if changed != 1 {
		t.Fatalf("files_changed = %d, want 1", changed)
	}
}

// TestCleanupNotYetDue: a cleanup whose execute_after lies in the future is
// not claimed and touches nothing; once the clock reaches it, it runs.
func TestCleanupNotYetDue(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	a := filepath.Join(e.root, "a.jpg")
	writeJPEG(t, a, 30, 30)
	e.scanAndHash()
	th := e.admit(a, store.FormatJPEG, 16)
	if did, err := e.x.RunThumbnailOnce(ctx); !did || err != nil {
		t.Fatalf("render: did=%v err=%v", did, err)
	}
	group := groupOf(t, e.file(a)).String()
	if err := e.p.ScheduleCleanup(ctx, group, time.Hour); err != nil {
		t.Fatal(err)
	}
	if did, err := e.x.RunCleanupOnce(ctx); did || err != nil {
		t.Fatalf("cleanup before execute_after: did=%v err=%v", did, err)
	}
	var status string
	e.st.DB.QueryRow(`SELECT status FROM thumbnail_cleanup_jobs`).Scan(&status)
	var rows int
	e.st.DB.QueryRow(`SELECT COUNT(*) FROM thumbnails WHERE id = ?`, th.ID).Scan(&rows)
	if _, err := os.Stat(th.OutputPath); err != nil || rows != 1 || status != store.StatusPending {
		t.Fatalf("early cleanup touched state: status %s rows %d cache %v", status, rows, err)
	}
	e.st.Now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if did, err := e.x.RunCleanupOnce(ctx); !did || err != nil {
		t.Fatalf("due cleanup: did=%v err=%v", did, err)
	}
	e.st.DB.QueryRow(`SELECT status FROM thumbnail_cleanup_jobs`).Scan(&status)
	if _, err := os.Stat(th.OutputPath); !os.IsNotExist(err) || status != store.StatusCompleted {
		t.Fatalf("due cleanup: status %s cache %v", status, err)
	}
}

// TestWebPInputThumbnail renders thumbnails of a WebP source (made by
// ffmpeg) in both output formats.
func TestWebPInputThumbnail(t *testing.T) {
	ff := testsvc.Program(t, "ffmpeg")
	e := newEnv(t, true)
	src := filepath.Join(e.root, "pic.webp")
	out, err := exec.Command(ff, "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=240x120:rate=1",
		"-frames:v", "1", "-c:v", "libwebp", src).CombinedOutput()
	if err != nil {
		t.Fatalf("make webp: %v %s", err, out)
	}
	e.scanAndHash()
	for _, format := range []string{store.FormatJPEG, store.FormatWebP} {
		th := e.admit(src, format, 60)
		if th.MediaType != store.MediaImage {
			t.Fatalf("webp admitted as %s", th.MediaType)
		}
		if did, err := e.x.RunThumbnailOnce(context.Background()); !did || err != nil {
			t.Fatalf("%s: did=%v err=%v", format, did, err)
		}
		status, code, w, h := e.thumbStatus(th.ID)
		if status != store.StatusReady || w != 60 || h != 30 {
			t.Fatalf("webp → %s: %s %s %dx%d, want ready 60x30", format, status, code, w, h)
		}
		data, err := os.ReadFile(th.OutputPath)
		if err != nil {
			t.Fatal(err)
		}
		magic := map[string][]byte{store.FormatJPEG: {0xff, 0xd8}, store.FormatWebP: []byte("RIFF")}[format]
		if !bytes.HasPrefix(data, magic) {
			t.Fatalf("%s output starts % x", format, data[:min(8, len(data))])
		}
	}
}

// TestHashProgressInHeartbeat holds a hash job after the first spans of a
// multi-MiB file until a heartbeat has persisted the intermediate progress.
func TestHashProgressInHeartbeat(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	big := filepath.Join(e.root, "big.bin")
	if err := os.WriteFile(big, bytes.Repeat([]byte("0123456789abcdef"), 4<<16), 0o644); err != nil { // 4 MiB
		t.Fatal(err)
	}
	if _, err := e.p.EnqueueScan(ctx); err != nil {
		t.Fatal(err)
	}
	e.runJob()
	// A heartbeat every second, for the hash alone: the scan before it
	// could outlast a shorter lease on a busy machine and lose its own.
	e.x.LeaseTTL = 3 * time.Second
	job, err := e.p.EnqueueHash(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Uint64 // progress * 1e6 seen persisted while running
	// Spans are hashed on several workers: each holds after its span until
	// a heartbeat has persisted progress, so none can run to the end first.
	executor.SetHashChunk(e.x, func(done int64) {
		if seen.Load() != 0 {
			return
		}
		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) {
			var p float64
			var status string
			e.st.DB.QueryRow(`SELECT progress, status FROM jobs WHERE id = ?`, job.ID).Scan(&p, &status)
			if status == store.StatusRunning && p > 0 && p < 1 {
				seen.Store(uint64(p * 1e6))
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	if j := e.runJob(); j.Status != store.StatusCompleted || j.Progress != 1 {
		t.Fatalf("hash job %s %.2f", j.Status, j.Progress)
	}
	p := float64(seen.Load()) / 1e6
	if p <= 0 || p >= 1 {
		t.Fatalf("no intermediate progress persisted by a heartbeat (saw %.3f)", p)
	}
}
