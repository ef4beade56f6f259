package storage_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/storage"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// TestFetchWriteFailureIsLocal: when the local side cannot take the body
// (the runner's disk full: /dev/full answers every write with ENOSPC), the
// fetch fails with that write error, for an object and a signed URL alike.
// It is no *storage.Error: the storage answered, and its retry table (a
// retryable storage_unreachable, before) must not describe the runner's
// own disk.
func TestFetchWriteFailureIsLocal(t *testing.T) {
	b := testsvc.S3(t)
	putRandom(t, b, "in/src.wav", 300<<10)
	bucket := storage.Bucket{Endpoint: b.Endpoint, Region: b.Region, Name: b.Name}
	u, err := b.Client.PresignedGetObject(context.Background(), b.Name, "in/src.wav", time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := storage.NewClient(storage.Options{HeaderTimeout: 5 * time.Second})
	for _, tc := range []struct {
		name string
		src  storage.Source
	}{
		{"object", storage.Source{Bucket: bucket, Key: "in/src.wav"}},
		{"signed URL", storage.Source{URL: u.String()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
			if err != nil {
				t.Skipf("no /dev/full: %v", err)
			}
			defer full.Close()
			_, err = c.Fetch(context.Background(), tc.src, creds(b), full, 0)
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("got %v, want ENOSPC", err)
			}
			if cl, ok := storage.ClassOf(err); ok {
				t.Fatalf("write failure classed as a storage failure (%s): %v", cl, err)
			}
		})
	}
}
