package storage_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/vesta-cx/euterpe/central/storage"
	"github.com/vesta-cx/euterpe/central/storage/storagetest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// TestTimeoutsAreRetryable: a server that accepts the connection and never
// answers makes the request time out (the transport's response-header
// timeout, which matches context.DeadlineExceeded); that is a retryable
// storage failure (contract §5), not a final one. Only the caller's own
// context ending is final.
func TestTimeoutsAreRetryable(t *testing.T) {
	ep := testsvc.SilentServer(t)
	c := storage.NewClient(storage.Options{HeaderTimeout: 300 * time.Millisecond})
	bucket := storage.Bucket{Endpoint: ep, Region: "us-east-1", Name: "source-bucket"}
	cr := storage.Credentials{AccessKeyID: "a", SecretAccessKey: "b"}
	path := filepath.Join(t.TempDir(), "o")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"signed URL fetch", func(ctx context.Context) error {
			_, err := c.Fetch(ctx, storage.Source{URL: ep + "/in/a.wav?X-Amz-Signature=abc"}, storage.Credentials{}, io.Discard, 0)
			return err
		}},
		{"object fetch", func(ctx context.Context) error {
			_, err := c.Fetch(ctx, storage.Source{Bucket: bucket, Key: "a.wav"}, cr, io.Discard, 0)
			return err
		}},
		{"upload", func(ctx context.Context) error {
			_, err := c.Upload(ctx, bucket, "o", path, "audio/ogg", cr)
			return err
		}},
	}
	for _, tc := range calls {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(context.Background())
			var se *storage.Error
			if !errors.As(err, &se) {
				t.Fatalf("got %v, want *storage.Error", err)
			}
			if se.Class() != storage.Retryable || se.ErrorCode() != "storage_timeout" {
				t.Fatalf("hung server: class=%v code=%s (%v)", se.Class(), se.ErrorCode(), err)
			}
			// The caller's own deadline is not the storage's fault: final.
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			err = tc.call(ctx)
			if !errors.As(err, &se) || se.Class() != storage.Final {
				t.Fatalf("caller's deadline: %v", err)
			}
		})
	}
}

// TestCopyDeadlineIsRetryable: a server-side copy that outlives its own
// CopyDeadline while the caller's context is live timed out (the storage
// was slow): retryable storage_timeout, not final, and the incomplete
// multipart uploads at the destination are aborted. The caller's own
// deadline ending the copy stays final and sweeps nothing.
func TestCopyDeadlineIsRetryable(t *testing.T) {
	b := testsvc.S3(t)
	p := storagetest.New(t, b.Endpoint)
	// The slow copy outlasts the header timeout and any stall of a loaded
	// machine by far, so a copy that returns well before it was ended by
	// its deadline, not by waiting the copy out.
	const slow = time.Minute
	c := storage.NewClient(storage.Options{HeaderTimeout: slow})
	bucket := storage.Bucket{Endpoint: p.URL, Region: b.Region, Name: b.Name}
	data := putRandom(t, b, "out/.euterpe-attempt-1/a.opus", 64<<10)
	const dst = "out/a.opus"
	ctx := context.Background()

	// What a multipart copy cut at its completion (or whose initiation's
	// answer was lost) leaves behind, which minio-go does not abort: an
	// upload at dst that was never completed.
	core := minio.Core{Client: b.Client}
	incomplete := func() int {
		n := 0
		for u := range b.Client.ListIncompleteUploads(ctx, b.Name, dst, true) {
			if u.Err != nil {
				t.Fatal(u.Err)
			}
			if u.Key == dst {
				n++
			}
		}
		return n
	}
	if _, err := core.NewMultipartUpload(ctx, b.Name, dst, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := incomplete(); n != 1 {
		t.Fatalf("%d incomplete uploads before the copy, want 1", n)
	}

	p.SlowCopies(1, slow)
	start := time.Now()
	err := c.Copy(ctx, bucket, "out/.euterpe-attempt-1/a.opus", dst, creds(b), storage.CopyDeadline(time.Now().Add(300*time.Millisecond)))
	var se *storage.Error
	if !errors.As(err, &se) || se.Class() != storage.Retryable || se.ErrorCode() != "storage_timeout" {
		t.Fatalf("copy past its own deadline: %v (class %v)", err, classOf(err))
	}
	if d := time.Since(start); d > slow/3 {
		t.Fatalf("copy took %v past a 300ms deadline", d)
	}
	if n := incomplete(); n != 0 {
		t.Fatalf("%d incomplete uploads left at %s after the timed-out copy", n, dst)
	}

	// The caller's deadline: final, as before.
	if _, err := core.NewMultipartUpload(ctx, b.Name, dst, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	p.SlowCopies(1, slow)
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err = c.Copy(cctx, bucket, "out/.euterpe-attempt-1/a.opus", dst, creds(b), storage.CopyDeadline(time.Now().Add(time.Minute)))
	if !errors.As(err, &se) || se.Class() != storage.Final {
		t.Fatalf("caller's deadline: %v (class %v)", err, classOf(err))
	}
	if n := incomplete(); n != 1 {
		t.Fatalf("%d incomplete uploads after the caller gave up, want 1 (no sweep outside the caller's context)", n)
	}

	// Storage fast again: the copy lands.
	if err := c.Copy(ctx, bucket, "out/.euterpe-attempt-1/a.opus", dst, creds(b), storage.CopyDeadline(time.Now().Add(time.Minute))); err != nil {
		t.Fatal(err)
	}
	obj, err := b.Client.GetObject(ctx, b.Name, dst, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	got, err := io.ReadAll(obj)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("copied object: %d bytes, equal %v, err %v", len(got), bytes.Equal(got, data), err)
	}
}

func classOf(err error) string {
	cl, ok := storage.ClassOf(err)
	if !ok {
		return "not a storage error"
	}
	return cl.String()
}
