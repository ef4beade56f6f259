package x

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/edge/library/filehash"
)

func TestSpeed(t *testing.T) {
	path := "/tmp/hb/big.bin"
	p := filehash.NewPool(0)
	defer p.Close()
	for i := 0; i < 3; i++ {
		f, _ := os.Open(path)
		t0 := time.Now()
		r, err := filehash.File(context.Background(), p, f, "blake3", nil)
		d := time.Since(t0)
		f.Close()
		t1 := time.Now()
		out, _ := exec.Command("b3sum", "--no-names", path).Output()
		d2 := time.Since(t1)
		t.Logf("ours %v %.0f MB/s, b3sum %v %.0f MB/s ratio %.2f %v %s %s", d, 1024/d.Seconds(), d2, 1024/d2.Seconds(), d2.Seconds()/d.Seconds(), err, r.Digest[:8], out[:8])
	}
}
