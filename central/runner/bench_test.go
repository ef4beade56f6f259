package runner_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/central/transcode"
	"github.com/vesta-cx/euterpe/central/transcode/transcodetest"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

func benchEnv(b *testing.B, keys *credentials.Keyring) (*env, string) {
	testsvc.Program(b, "ffmpeg")
	url := sqltest.URL(b, sqldb.SQLite)
	db, err := sqldb.Open(context.Background(), url, "")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = db.Close() })
	if _, err := sqldb.Migrate(context.Background(), db, schema.Migrations()); err != nil {
		b.Fatal(err)
	}
	e := newEnvKeys(b, db, keys)
	// Straight to the S3 server: the fault proxy is for failure tests.
	e.proxy.URL = e.s3.Endpoint
	return e, url
}

// BenchmarkOpus10Min runs a 10-minute 48 kHz stereo WAV → opus 128 kb/s
// through the whole runner path (claim, S3 download, ffprobe, ffmpeg,
// checksum, S3 upload, succeed) and plain ffmpeg on the same local file
// with the same encoder arguments, and reports the runner's overhead.
func BenchmarkOpus10Min(b *testing.B) {
	e, _ := benchEnv(b, testKeys(b))
	src := filepath.Join(b.TempDir(), "src.wav")
	transcodetest.WAV(b, src, 600, 48000, 2)
	e.putFile("in/src.wav", src)
	rend := inbox.Rendition{Name: "opus", Codec: "opus", BitrateKbps: 128}
	tr := transcode.Rendition{Name: rend.Name, Codec: rend.Codec, BitrateKbps: rend.BitrateKbps}
	r := e.runner(nil)
	rounds := 3
	if v, err := strconv.Atoi(os.Getenv("EUTERPE_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	b.ResetTimer()
	// The two are interleaved and the best round of each is kept: on a
	// shared machine the minimum is the figure least disturbed by others.
	plain, full := time.Duration(1<<62), time.Duration(1<<62)
	var phases map[string]time.Duration
	for range b.N * rounds {
		start := time.Now()
		cmd := exec.Command("ffmpeg", tr.Args(src, filepath.Join(b.TempDir(), tr.FileName()))...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("ffmpeg: %v %s", err, out)
		}
		plain = min(plain, time.Since(start))

		id := e.enqueue("in/src.wav", []inbox.Rendition{rend}, nil)
		start = time.Now()
		if ok, err := r.RunOnce(context.Background()); !ok || err != nil {
			b.Fatalf("RunOnce: %v %v", ok, err)
		}
		if d := time.Since(start); d < full {
			full, phases = d, e.phases(id)
		}
		if v := e.view(id); v.Status != schema.StatusSucceeded {
			b.Fatalf("status %s %+v", v.Status, v.LastError)
		}
	}
	b.StopTimer()
	b.ReportMetric(plain.Seconds(), "ffmpeg-s")
	b.ReportMetric(full.Seconds(), "pipeline-s")
	b.ReportMetric(100*(full.Seconds()-plain.Seconds())/plain.Seconds(), "overhead-%")
	for name, d := range phases {
		b.ReportMetric(d.Seconds(), name+"-s")
	}
	b.ReportMetric(0, "ns/op")
}

// phases measures the time a job spent in each working status from the
// occurred_at of its events.
func (e *env) phases(id string) map[string]time.Duration {
	rows, err := e.db.QueryContext(context.Background(), e.db.Rebind(`SELECT payload FROM job_outbox_events WHERE job_id = ? ORDER BY sequence`), id)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	at := map[string]time.Time{}
	for rows.Next() {
		var p string
		_ = rows.Scan(&p)
		var ev struct {
			Status     string    `json:"status"`
			OccurredAt time.Time `json:"occurred_at"`
			Progress   *int      `json:"progress"`
		}
		if json.Unmarshal([]byte(p), &ev) == nil && ev.Progress == nil {
			at[ev.Status] = ev.OccurredAt
		}
	}
	return map[string]time.Duration{
		"claim":   at["fetching"].Sub(at["claimed"]),
		"fetch":   at["processing"].Sub(at["fetching"]),
		"process": at["uploading"].Sub(at["processing"]),
		"upload":  at["succeeded"].Sub(at["uploading"]),
	}
}

// BenchmarkPeakRSS2GB has a separate runner process transcode a 2 GiB WAV
// (EUTERPE_BENCH_RSS_BYTES to change the size) from S3 to S3 and reports
// the process's peak resident memory (VmHWM; ffmpeg is a child process and
// not counted).
func BenchmarkPeakRSS2GB(b *testing.B) {
	size := int64(2 << 30)
	if v, err := strconv.ParseInt(os.Getenv("EUTERPE_BENCH_RSS_BYTES"), 10, 64); err == nil && v > 0 {
		size = v
	}
	spec := "bench:" + credentials.NewKey()
	keys, _ := credentials.ParseKeyring(spec, "")
	e, url := benchEnv(b, keys)
	src := filepath.Join(b.TempDir(), "big.wav")
	seconds := float64(size) / (48000 * 2 * 2)
	transcodetest.WAV(b, src, seconds, 48000, 2)
	srcSize := e.putFile("in/big.wav", src)
	_ = os.Remove(src)
	b.ResetTimer()
	for range b.N {
		id := e.enqueue("in/big.wav", []inbox.Rendition{{Name: "flac", Codec: "flac"}}, nil)
		var stderr bytes.Buffer
		child := exec.Command(os.Args[0], "-test.run=^$")
		child.Env = append(os.Environ(), childEnv+"=1", childDBEnv+"="+url, childKeysEnv+"="+spec, childTmpEnv+"="+e.tmp)
		child.Stderr = &stderr
		start := time.Now()
		if err := child.Start(); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Minute)
		for e.view(id).Status != schema.StatusSucceeded {
			if v := e.view(id); inbox.Transitions.IsTerminal(v.Status) || time.Now().After(deadline) {
				_ = child.Process.Kill()
				b.Fatalf("status %s %+v\n%s", v.Status, v.LastError, stderr.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
		wall := time.Since(start)
		hwm := vmHWM(child.Process.Pid)
		_ = child.Process.Kill()
		_ = child.Wait()
		b.ReportMetric(float64(hwm)/(1<<20), "runner-peak-rss-MB")
		b.ReportMetric(float64(srcSize)/(1<<20), "source-MB")
		b.ReportMetric(wall.Seconds(), "wall-s")
	}
	b.ReportMetric(0, "ns/op")
}

// vmHWM is the peak resident set of pid in bytes, from /proc.
func vmHWM(pid int) int64 {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return -1
}
