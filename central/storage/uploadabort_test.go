package storage_test

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/storage"
	"github.com/vesta-cx/euterpe/central/storage/storagetest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// TestUploadEndedLeavesNoIncompleteUpload: a multipart upload whose
// context ends while parts are on the wire (the caller's cancel, the upload
// deadline) is aborted on the server before Upload returns, so no
// incomplete upload (invisible to a listing, billed as storage) is left at
// the key.
func TestUploadEndedLeavesNoIncompleteUpload(t *testing.T) {
	b := testsvc.S3(t)
	c := storage.NewClient(storage.Options{HeaderTimeout: 5 * time.Second})
	c.PartSize = 5 << 20
	bucket := storage.Bucket{Endpoint: b.Endpoint, Region: b.Region, Name: b.Name}
	path := filepath.Join(t.TempDir(), "out.bin")
	data := make([]byte, 24<<20)
	_, _ = rand.Read(data)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	key := "out/.euterpe-attempt-1/out.bin"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sent atomic.Int64
	_, err := c.Upload(ctx, bucket, key, path, "audio/ogg", creds(b), storage.OnProgress(func(n int) {
		if sent.Add(int64(n)) > 1<<20 {
			cancel()
		}
	}))
	if err == nil {
		t.Fatal("upload cancelled mid-way succeeded")
	}
	if n := incompleteUploads(t, b, key); n != 0 {
		t.Fatalf("%d incomplete multipart uploads left at %s after %v", n, key, err)
	}
}

// TestUploadDeadlineSweepsLostInitiation: an upload that runs out of its
// own UploadDeadline while the caller's context is live is a retryable
// storage_timeout, and a multipart upload whose initiation reached the
// server while its answer was lost (minio-go never learns its ID, so it
// cannot abort it) is swept from the key. Ended by the caller's own
// context instead, the key is not swept: it may belong to a later owner.
func TestUploadDeadlineSweepsLostInitiation(t *testing.T) {
	b := testsvc.S3(t)
	p := storagetest.New(t, b.Endpoint)
	// The lost initiation's answer never comes: the header timeout is far
	// beyond the bound below, so only the deadlines can end the upload.
	c := storage.NewClient(storage.Options{HeaderTimeout: time.Minute})
	c.PartSize = 5 << 20
	bucket := storage.Bucket{Endpoint: p.URL, Region: b.Region, Name: b.Name}
	path := filepath.Join(t.TempDir(), "out.bin")
	if err := os.WriteFile(path, make([]byte, 12<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		ctx       func() (context.Context, context.CancelFunc)
		deadline  time.Duration
		class     storage.Class
		remaining int
	}{
		{"own deadline", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			300 * time.Millisecond, storage.Retryable, 0},
		{"caller's deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 300*time.Millisecond)
		}, time.Minute, storage.Final, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := "out/" + tc.name + ".bin"
			p.LoseInitiations(1)
			ctx, cancel := tc.ctx()
			defer cancel()
			start := time.Now()
			_, err := c.Upload(ctx, bucket, key, path, "audio/ogg", creds(b), storage.UploadDeadline(time.Now().Add(tc.deadline)))
			var se *storage.Error
			if !errors.As(err, &se) || se.Class() != tc.class {
				t.Fatalf("got %v (class %v), want class %v", err, classOf(err), tc.class)
			}
			if tc.class == storage.Retryable && se.ErrorCode() != "storage_timeout" {
				t.Fatalf("own deadline: code %s (%v)", se.ErrorCode(), err)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Fatalf("upload took %v past its bound", d)
			}
			wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer wcancel()
			if err := p.WaitLostInitiations(wctx); err != nil {
				t.Fatal(err)
			}
			if n := incompleteUploads(t, b, key); n != tc.remaining {
				t.Fatalf("%d incomplete multipart uploads at %s, want %d", n, key, tc.remaining)
			}
		})
	}
}
