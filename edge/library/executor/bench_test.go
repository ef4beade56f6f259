package executor_test

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// BenchmarkLibraryHash hashes a library of EUTERPE_BENCH_LIB_FILES files
// (default 200) whose sizes are spread log-uniformly from 1 MB to
// EUTERPE_BENCH_LIB_MAX_MB (default 100), as a hash job does, and runs b3sum
// and sha256sum over the same files in the same run: warm (page cache
// filled by a previous read) and cold (every file dropped from the cache
// with posix_fadvise(DONTNEED) first). ratio is our throughput over the
// tool's. The files are kept in $TMPDIR/euterpe-bench-library between runs.
func BenchmarkLibraryHash(b *testing.B) {
	n := envInt("EUTERPE_BENCH_LIB_FILES", 200)
	maxMB := envInt("EUTERPE_BENCH_LIB_MAX_MB", 100)
	t := &testing.T{}
	e := newEnv(t, false)
	src := filepath.Join(os.TempDir(), "euterpe-bench-library")
	paths, total := benchLibrary(b, src, n, maxMB)
	// The executor only reads under its roots: link the kept files in.
	for i, p := range paths {
		link := filepath.Join(e.root, filepath.Base(p))
		if err := os.Link(p, link); err != nil {
			if err := os.Symlink(p, link); err != nil {
				b.Fatal(err)
			}
		}
		paths[i] = link
	}
	ctx := context.Background()
	mb := float64(total) / 1e6
	for _, c := range []struct{ algo, tool string }{{store.AlgoBLAKE3, "b3sum"}, {store.AlgoSHA256, "sha256sum"}} {
		bin, err := exec.LookPath(c.tool)
		if err != nil {
			b.Skipf("%s not installed", c.tool)
		}
		for _, cache := range []string{"warm", "cold"} {
			b.Run(c.algo+"/"+cache, func(b *testing.B) {
				prepare := func() {
					for _, p := range paths {
						if cache == "cold" {
							dropCache(b, p)
						} else if _, err := os.ReadFile(p); err != nil {
							b.Fatal(err)
						}
					}
				}
				var ours, theirs time.Duration
				for i := 0; i < b.N; i++ {
					prepare()
					start := time.Now()
					digests, err := executor.HashPaths(ctx, e.x, paths, c.algo)
					ours += time.Since(start)
					if err != nil {
						b.Fatal(err)
					}
					prepare()
					start = time.Now()
					out, err := exec.Command(bin, paths...).Output()
					theirs += time.Since(start)
					if err != nil {
						b.Fatal(err)
					}
					lines := strings.Split(strings.TrimSpace(string(out)), "\n")
					for j, d := range digests {
						if !strings.HasPrefix(lines[j], d) {
							b.Fatalf("%s: ours %s, %s %s", paths[j], d, c.tool, lines[j])
						}
					}
				}
				b.ReportMetric(mb*float64(b.N)/ours.Seconds(), "MB/s")
				b.ReportMetric(mb*float64(b.N)/theirs.Seconds(), c.tool+"-MB/s")
				b.ReportMetric(theirs.Seconds()/ours.Seconds(), "ratio")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// benchLibrary creates (or reuses) n files in dir with sizes log-uniform
// from 1 MB to maxMB and returns their paths and total size.
func benchLibrary(b *testing.B, dir string, n, maxMB int) ([]string, int64) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	src := rand.NewChaCha8([32]byte{1})
	var paths []string
	var total int64
	buf := make([]byte, 1<<20)
	for i := 0; i < n; i++ {
		size := int64(1e6 * math.Exp(r.Float64()*math.Log(float64(maxMB))))
		path := filepath.Join(dir, fmt.Sprintf("track-%03d-%d.flac", i, size))
		paths = append(paths, path)
		total += size
		if st, err := os.Stat(path); err == nil && st.Size() == size {
			continue
		}
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		for left := size; left > 0; {
			k := min(int64(len(buf)), left)
			_, _ = src.Read(buf[:k])
			if _, err := f.Write(buf[:k]); err != nil {
				b.Fatal(err)
			}
			left -= k
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
	}
	return paths, total
}

// dropCache asks the kernel to forget path's cached pages, so the next
// read comes from the disk (only clean pages are dropped: the files were
// written before, and are synced first).
func dropCache(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	_ = f.Sync()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatal(err)
	}
}
