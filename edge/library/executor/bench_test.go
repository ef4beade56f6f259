package executor_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// envInt reads a benchmark size from the environment.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkScan walks EUTERPE_BENCH_SCAN_FILES (default 100000) small files.
func BenchmarkScan(b *testing.B) {
	n := envInt("EUTERPE_BENCH_SCAN_FILES", 100_000)
	t := &testing.T{}
	e := newEnv(t, false)
	e.t = t
	for i := 0; i < n; i++ {
		dir := filepath.Join(e.root, strconv.Itoa(i/1000), strconv.Itoa(i/100%10))
		if i%100 == 0 {
			os.MkdirAll(dir, 0o755)
		}
		os.WriteFile(filepath.Join(dir, strconv.Itoa(i)), []byte(strconv.Itoa(i)), 0o644)
	}
	ctx := context.Background()
	b.ResetTimer()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		if _, err := e.p.EnqueueScan(ctx); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if _, err := e.x.RunJobOnce(ctx); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
	}
	var seen int
	e.st.DB.QueryRow(`SELECT COUNT(*) FROM library_files`).Scan(&seen)
	if seen != n {
		b.Fatalf("%d files recorded, want %d", seen, n)
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "files/s")
}

// BenchmarkHash hashes one EUTERPE_BENCH_HASH_MB (default 1024) file with
// BLAKE3 and SHA-256 and runs b3sum and sha256sum on the same file in the
// same run; ratio is our throughput over theirs.
func BenchmarkHash(b *testing.B) {
	mb := envInt("EUTERPE_BENCH_HASH_MB", 1024)
	t := &testing.T{}
	e := newEnv(t, false)
	path := filepath.Join(e.root, "big.bin")
	f, _ := os.Create(path)
	w := bufio.NewWriterSize(f, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 1<<20)
	for i := 0; i < mb; i++ {
		for j := 0; j < len(buf); j += 8 {
			v := r.Uint64()
			for k := 0; k < 8; k++ {
				buf[j+k] = byte(v >> (8 * k))
			}
		}
		w.Write(buf)
	}
	w.Flush()
	f.Close()
	ctx := context.Background()
	size := float64(mb)
	for _, c := range []struct{ algo, tool string }{{store.AlgoBLAKE3, "b3sum"}, {store.AlgoSHA256, "sha256sum"}} {
		b.Run(c.algo, func(b *testing.B) {
			// warm the page cache so both sides read from memory
			if _, _, _, err := e.x.HashFile(ctx, path, c.algo, nil); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			var ours, theirs time.Duration
			for i := 0; i < b.N; i++ {
				start := time.Now()
				digest, _, _, err := e.x.HashFile(ctx, path, c.algo, nil)
				if err != nil {
					b.Fatal(err)
				}
				ours += time.Since(start)
				bin, err := exec.LookPath(c.tool)
				if err != nil {
					b.Skipf("%s not installed", c.tool)
				}
				start = time.Now()
				out, err := exec.Command(bin, path).Output()
				theirs += time.Since(start)
				if err != nil {
					b.Fatal(err)
				}
				if !strings.HasPrefix(string(out), digest) {
					b.Fatalf("digest mismatch: ours %s, %s %s", digest, c.tool, out)
				}
			}
			oursMBs := size * float64(b.N) / ours.Seconds()
			theirsMBs := size * float64(b.N) / theirs.Seconds()
			b.ReportMetric(oursMBs, "MB/s")
			b.ReportMetric(theirsMBs, c.tool+"-MB/s")
			b.ReportMetric(oursMBs/theirsMBs, "ratio")
		})
	}
}

// BenchmarkThumbnailJPEG renders EUTERPE_BENCH_THUMBS (default 8)
// thumbnails of EUTERPE_BENCH_THUMB_MP-megapixel (default 12) JPEGs.
func BenchmarkThumbnailJPEG(b *testing.B) {
	count := envInt("EUTERPE_BENCH_THUMBS", 8)
	mp := envInt("EUTERPE_BENCH_THUMB_MP", 12)
	t := &testing.T{}
	e := newEnv(t, false)
	e.t = t
	e.p.ThumbQueueCapacity = 1 << 20
	w := 4000 * mp / 12
	h := 3000 * mp / 12
	src := filepath.Join(e.root, "src.jpg")
	writeJPEG(t, src, w, h)
	data, _ := os.ReadFile(src)
	for i := 0; i < count; i++ {
		os.WriteFile(filepath.Join(e.root, fmt.Sprintf("p%03d.jpg", i)), data, 0o644)
	}
	e.p.EnqueueScan(context.Background())
	e.x.RunJobOnce(context.Background())
	ctx := context.Background()
	b.ResetTimer()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e.st.DB.Exec(`DELETE FROM thumbnails`)
		rows, _ := e.st.DB.Query(`SELECT path FROM library_files WHERE path LIKE '%/p%'`)
		var paths []string
		for rows.Next() {
			var p string
			rows.Scan(&p)
			paths = append(paths, p)
		}
		rows.Close()
		for _, p := range paths {
			e.admit(p, store.FormatJPEG, 320)
		}
		b.StartTimer()
		start := time.Now()
		for range paths {
			if did, err := e.x.RunThumbnailOnce(ctx); !did || err != nil {
				b.Fatal(did, err)
			}
		}
		total += time.Since(start)
	}
	var ready int
	e.st.DB.QueryRow(`SELECT COUNT(*) FROM thumbnails WHERE status = 'ready'`).Scan(&ready)
	if ready != count {
		b.Fatalf("%d ready, want %d", ready, count)
	}
	b.ReportMetric(float64(count*b.N)/total.Seconds(), "thumbs/s")
	_ = executor.ThumbnailIOBucket
}
