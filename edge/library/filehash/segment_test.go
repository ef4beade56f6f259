package filehash

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"lukechampine.com/blake3/guts"
)

// Every kernel set this CPU runs must give every segment the node guts
// gives it, at any counter, including one whose low word wraps inside the
// segment.
func TestSegmentKernelsMatchGuts(t *testing.T) {
	sets := supportedKernels()
	if len(sets) == 0 {
		t.Skip("no AVX2 or AVX-512 here: segments are hashed by guts alone (TestBLAKE3MatchesReference covers it)")
	}
	t.Logf("kernel sets on this CPU: %v", KernelSets())
	r := rand.New(rand.NewPCG(7, 9))
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := (*bp)[:SegmentSize]
	for name, k := range sets {
		for _, counter := range []uint64{0, 1024, 5 << 20, 1<<32 - 100, 1<<40 + 3<<10} {
			for i := range buf {
				buf[i] = byte(r.Uint32())
			}
			want := subtreeGuts(buf, counter)
			got := segmentNode(k, (*[SegmentSize]byte)(buf), counter)
			if got != want {
				t.Fatalf("%s, counter %d: kernels %x, guts %x", name, counter, guts.ChainingValue(got), guts.ChainingValue(want))
			}
		}
	}
}

func BenchmarkSegment(b *testing.B) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := (*bp)[:SegmentSize]
	b.Run("guts", func(b *testing.B) {
		b.SetBytes(SegmentSize)
		for b.Loop() {
			subtreeGuts(buf, 0)
		}
	})
	for name, k := range supportedKernels() {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(SegmentSize)
			for b.Loop() {
				segmentNode(k, (*[SegmentSize]byte)(buf), 0)
			}
		})
	}
}

// blake3_amd64.s is generated; a hand edit or a generator change without
// `go generate` would leave them apart.
func TestGeneratedAssemblyIsCurrent(t *testing.T) {
	out := filepath.Join(t.TempDir(), "blake3_amd64.s")
	if b, err := exec.Command("go", "run", "asmgen.go", "-out", out).CombinedOutput(); err != nil {
		t.Fatalf("asmgen: %v\n%s", err, b)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("blake3_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatal("blake3_amd64.s differs from what asmgen.go writes: run go generate ./edge/library/filehash")
	}
}
