package filehash_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/zeebo/blake3"

	"github.com/vesta-cx/euterpe/edge/library/filehash"
)

const seg = filehash.SegmentSize

// sizes sit on and around every boundary the tree has: a chunk (1 KiB), a
// 16-chunk vector block, a segment, and tails of several eigentrees.
var sizes = []int64{
	0, 1, 63, 64, 65, 1023, 1024, 1025, 2047, 2048, 2049, 3 * 1024,
	16*1024 - 1, 16 * 1024, 16*1024 + 1, 17 * 1024, 31*1024 + 7, 32 * 1024, 33 * 1024,
	seg - 1, seg, seg + 1, seg + 1024, seg + 16*1024 + 5,
	2*seg - 1, 2 * seg, 2*seg + 1, 3 * seg, 3*seg + 1, 4*seg + 7*1024 + 3,
	5*seg - 1, 8 * seg, 8*seg + seg/2 + 1025, 13*seg + 12345,
}

func writeRandom(t *testing.T, dir string, size int64, seed uint64) string {
	t.Helper()
	b := make([]byte, size)
	r := rand.New(rand.NewPCG(seed, uint64(size)))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	path := filepath.Join(dir, fmt.Sprintf("f%d-%d", seed, size))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func hashPath(t *testing.T, p *filehash.Pool, path, algo string) (filehash.Result, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return filehash.File(context.Background(), p, f, algo, nil)
}

// TestBLAKE3MatchesReference hashes files of every boundary size with one,
// two and three workers, through every segment kernel this CPU runs and
// through guts alone, and compares with zeebo/blake3's streaming digest
// and, when it is installed, b3sum's output for the same file.
func TestBLAKE3MatchesReference(t *testing.T) {
	b3sum, _ := exec.LookPath("b3sum")
	if b3sum == "" {
		t.Log("b3sum not installed: comparing with zeebo/blake3 only")
	}
	dir := t.TempDir()
	paths := make([]string, len(sizes))
	for i, size := range sizes {
		paths[i] = writeRandom(t, dir, size, uint64(i))
	}
	t.Logf("segment kernels: %v", filehash.KernelSets())
	for _, kernels := range filehash.KernelSets() {
		t.Run(kernels, func(t *testing.T) {
			defer filehash.UseKernels(kernels)()
			for _, workers := range []int{1, 2, 3} {
				func() {
					p := filehash.NewPool(workers)
					defer p.Close()
					for i, size := range sizes {
						checkBLAKE3(t, p, paths[i], size, workers, b3sum)
					}
				}()
			}
		})
	}
}

func checkBLAKE3(t *testing.T, p *filehash.Pool, path string, size int64, workers int, b3sum string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := blake3.Sum256(data)
	got, err := hashPath(t, p, path, filehash.BLAKE3)
	if err != nil {
		t.Fatalf("size %d, %d workers: %v", size, workers, err)
	}
	if got.Digest != hex.EncodeToString(want[:]) || got.Size != size {
		t.Fatalf("size %d, %d workers: got %s (%d bytes), want %x", size, workers, got.Digest, got.Size, want)
	}
	if b3sum != "" && workers == 2 {
		out, err := exec.Command(b3sum, "--no-names", path).Output()
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(string(out)) != got.Digest {
			t.Fatalf("size %d: b3sum %s, ours %s", size, out, got.Digest)
		}
	}
}

func TestSHA256MatchesReference(t *testing.T) {
	p := filehash.NewPool(2)
	defer p.Close()
	dir := t.TempDir()
	for i, size := range []int64{0, 1, seg - 1, seg, 3*seg + 5} {
		path := writeRandom(t, dir, size, uint64(i))
		data, _ := os.ReadFile(path)
		want := sha256.Sum256(data)
		got, err := hashPath(t, p, path, filehash.SHA256)
		if err != nil || got.Digest != hex.EncodeToString(want[:]) {
			t.Fatalf("size %d: %s %v, want %x", size, got.Digest, err, want)
		}
	}
}

// TestManyFilesAtOnce hashes files concurrently on one pool, as a hash job
// does, and checks every digest.
func TestManyFilesAtOnce(t *testing.T) {
	p := filehash.NewPool(2)
	defer p.Close()
	dir := t.TempDir()
	var wg sync.WaitGroup
	for i, size := range sizes {
		path := writeRandom(t, dir, size, uint64(100+i))
		data, _ := os.ReadFile(path)
		want := blake3.Sum256(data)
		wg.Go(func() {
			got, err := hashPath(t, p, path, filehash.BLAKE3)
			if err != nil || got.Digest != hex.EncodeToString(want[:]) {
				t.Errorf("size %d: %s %v", size, got.Digest, err)
			}
		})
	}
	wg.Wait()
}

// TestChangedWhileHashed changes the file after the first span is read, in
// each way a file can change, and expects ErrChanged, never a digest.
func TestChangedWhileHashed(t *testing.T) {
	cases := []struct {
		name   string
		change func(path string) error
	}{
		{"appended", func(path string) error {
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Write([]byte("more"))
			return err
		}},
		{"truncated", func(path string) error { return os.Truncate(path, seg/2) }},
		{"emptied", func(path string) error { return os.Truncate(path, 0) }},
		{"rewritten in place", func(path string) error {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt([]byte("x"), 5)
			return err
		}},
	}
	for _, algo := range []string{filehash.BLAKE3, filehash.SHA256} {
		for _, c := range cases {
			t.Run(algo+"/"+c.name, func(t *testing.T) {
				p := filehash.NewPool(1) // spans run in order, so the change lands before the rest
				defer p.Close()
				path := writeRandom(t, t.TempDir(), 6*seg+100, 7)
				f, err := os.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				var once sync.Once
				_, err = filehash.File(context.Background(), p, f, algo, func(int64) {
					once.Do(func() {
						if err := c.change(path); err != nil {
							t.Error(err)
						}
						// mtime granularity: make the change visible even on a coarse clock
						_ = os.Chtimes(path, fixedTime, fixedTime)
					})
				})
				if !errors.Is(err, filehash.ErrChanged) {
					t.Fatalf("err = %v, want ErrChanged", err)
				}
			})
		}
	}
}

func TestCancelled(t *testing.T) {
	p := filehash.NewPool(2)
	defer p.Close()
	path := writeRandom(t, t.TempDir(), 4*seg, 3)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, algo := range []string{filehash.BLAKE3, filehash.SHA256} {
		if _, err := filehash.File(ctx, p, f, algo, nil); !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: err = %v, want context.Canceled", algo, err)
		}
	}
}

// TestChangedWhileHashedMtimeRestored rewrites the file under the hash the
// way a tag editor does, keeping its size and putting its mtime back: only
// the ctime, which utimes cannot set, shows the change, and the digest of
// half old, half new bytes must not be returned.
func TestChangedWhileHashedMtimeRestored(t *testing.T) {
	cases := []struct {
		name string
		at   []int64 // offsets rewritten once the first span is read
	}{
		{"in the span already read", []int64{5}},
		{"in spans read and not yet read", []int64{5, 6*seg + 50}},
	}
	for _, algo := range []string{filehash.BLAKE3, filehash.SHA256} {
		for _, c := range cases {
			t.Run(algo+"/"+c.name, func(t *testing.T) {
				p := filehash.NewPool(1) // spans run in order, so the change lands before the rest
				defer p.Close()
				path := writeRandom(t, t.TempDir(), 6*seg+100, 11)
				if err := os.Chtimes(path, fixedTime, fixedTime); err != nil {
					t.Fatal(err)
				}
				f, err := os.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				var once sync.Once
				r, err := filehash.File(context.Background(), p, f, algo, func(int64) {
					once.Do(func() {
						w, err := os.OpenFile(path, os.O_WRONLY, 0)
						if err != nil {
							t.Error(err)
							return
						}
						for _, at := range c.at {
							if _, err := w.WriteAt([]byte{'x', 'y', 'z'}, at); err != nil {
								t.Error(err)
							}
						}
						w.Close()
						if err := os.Chtimes(path, fixedTime, fixedTime); err != nil {
							t.Error(err)
						}
					})
				})
				if !errors.Is(err, filehash.ErrChanged) {
					t.Fatalf("digest %q, err = %v; want ErrChanged", r.Digest, err)
				}
			})
		}
	}
}
