package executor_test

import (
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/zeebo/blake3"

	"github.com/vesta-cx/euterpe/edge/library/filehash"
)

// TestHashFileRetriesChangedFile changes a file under the hash: once (the
// second read is of the new content and its digest is returned) and on
// every read (the hash gives up with ErrChanged, never a digest).
func TestHashFileRetriesChangedFile(t *testing.T) {
	cases := []struct {
		name    string
		changes int // spans after which the file is appended to
		wantErr bool
	}{
		{"changed once", 1, false},
		{"changes every time", 1 << 20, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, false)
			path := filepath.Join(e.root, "moving.bin")
			if err := os.WriteFile(path, make([]byte, 3*filehash.SegmentSize+10), 0o644); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex // spans finish on several workers
			left := c.changes
			stamp := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
			digest, size, _, err := e.x.HashFile(context.Background(), path, "blake3", func(int64) {
				mu.Lock()
				defer mu.Unlock()
				if left == 0 {
					return
				}
				left--
				f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = f.Write([]byte("x"))
				_ = f.Close()
				stamp = stamp.Add(time.Second)
				_ = os.Chtimes(path, stamp, stamp)
			})
			if c.wantErr {
				if !errors.Is(err, filehash.ErrChanged) || digest != "" {
					t.Fatalf("digest %q, err %v; want ErrChanged", digest, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			data, _ := os.ReadFile(path)
			want := blake3.Sum256(data)
			if digest != hex.EncodeToString(want[:]) || size != int64(len(data)) {
				t.Fatalf("digest %s (%d bytes), want %x (%d)", digest, size, want, len(data))
			}
		})
	}
}
