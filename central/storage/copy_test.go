package storage_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/vesta-cx/euterpe/central/storage"
	"github.com/vesta-cx/euterpe/central/storage/storagetest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// incompleteUploads is how many incomplete multipart uploads are at key.
func incompleteUploads(t *testing.T, b testsvc.S3Bucket, key string) int {
	t.Helper()
	n := 0
	for u := range b.Client.ListIncompleteUploads(context.Background(), b.Name, key, true) {
		if u.Err != nil {
			t.Fatal(u.Err)
		}
		if u.Key == key {
			n++
		}
	}
	return n
}

// putStaged stores n random bytes at key as an upload would, with a
// Content-Type and user metadata a copy must keep.
func putStaged(t *testing.T, b testsvc.S3Bucket, key string, n int) []byte {
	t.Helper()
	data := make([]byte, n)
	_, _ = rand.Read(data)
	_, err := b.Client.PutObject(context.Background(), b.Name, key, bytes.NewReader(data), int64(n), minio.PutObjectOptions{
		ContentType:  "audio/ogg",
		UserMetadata: map[string]string{"Origin": "euterpe"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// absent fails unless bucket/key does not exist.
func absent(t *testing.T, b testsvc.S3Bucket, key string) {
	t.Helper()
	_, err := b.Client.StatObject(context.Background(), b.Name, key, minio.StatObjectOptions{})
	if minio.ToErrorResponse(err).StatusCode != 404 {
		t.Fatalf("%s: stat %v, want 404", key, err)
	}
}

// TestCopy: a source up to CopyPartSize is copied with one CopyObject
// request, a larger one in parts of CopyPartSize; either way the
// destination holds the source's bytes, Content-Type and metadata, and no
// multipart upload is left behind.
func TestCopy(t *testing.T) {
	b := testsvc.S3(t)
	p := storagetest.New(t, b.Endpoint)
	bucket := storage.Bucket{Endpoint: p.URL, Region: b.Region, Name: b.Name}
	ctx := context.Background()
	cases := []struct {
		name     string
		size     int
		partSize int64 // 0: the default, 5 GiB
		copies   int   // copy requests sent: 1 for CopyObject, one per part
	}{
		{"empty", 0, 0, 1},
		{"one request", 64 << 10, 0, 1},
		{"source of exactly one part", 5 << 20, 5 << 20, 1},
		{"in parts", 12 << 20, 5 << 20, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := storage.NewClient(storage.Options{HeaderTimeout: 5 * time.Second})
			if tc.partSize != 0 {
				c.CopyPartSize = tc.partSize
			}
			src, dst := "out/.euterpe-attempt-1/"+tc.name, "out/"+tc.name
			data := putStaged(t, b, src, tc.size)
			before := p.Copies()
			if err := c.Copy(ctx, bucket, src, dst, creds(b), storage.CopyDeadline(time.Now().Add(30*time.Second))); err != nil {
				t.Fatal(err)
			}
			if n := p.Copies() - before; n != tc.copies {
				t.Fatalf("%d copy requests, want %d", n, tc.copies)
			}
			obj, err := b.Client.GetObject(ctx, b.Name, dst, minio.GetObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer obj.Close()
			got, err := io.ReadAll(obj)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("copied object: %d bytes of %d, equal %v, err %v", len(got), len(data), bytes.Equal(got, data), err)
			}
			st, err := b.Client.StatObject(ctx, b.Name, dst, minio.StatObjectOptions{})
			if err != nil || st.ContentType != "audio/ogg" || st.UserMetadata["Origin"] != "euterpe" {
				t.Fatalf("copied object: Content-Type %q, metadata %v, err %v", st.ContentType, st.UserMetadata, err)
			}
			if n := incompleteUploads(t, b, dst); n != 0 {
				t.Fatalf("%d incomplete uploads left at %s", n, dst)
			}
		})
	}
}

// TestCopyFailures: a copy that fails, in one request or in parts, leaves
// neither an object nor an incomplete multipart upload at the destination,
// and fails with the class the runner acts on: refused (write-only
// credentials) is auth, slower than its CopyDeadline a retryable
// storage_timeout, a source replaced after its stat final.
func TestCopyFailures(t *testing.T) {
	b := testsvc.S3(t)
	p := storagetest.New(t, b.Endpoint)
	bucket := storage.Bucket{Endpoint: p.URL, Region: b.Region, Name: b.Name}
	ctx := context.Background()
	cases := []struct {
		name     string
		size     int
		partSize int64
		fault    func(t *testing.T, src string) // set up before the copy
		deadline time.Duration
		class    storage.Class
		code     string
	}{
		{"refused, one request", 64 << 10, 0, func(*testing.T, string) { p.DenyCopies(true) }, 30 * time.Second, storage.Auth, "storage_auth"},
		{"refused, in parts", 12 << 20, 5 << 20, func(*testing.T, string) { p.DenyCopies(true) }, 30 * time.Second, storage.Auth, "storage_auth"},
		{"slow, one request", 64 << 10, 0, func(*testing.T, string) { p.SlowCopies(1, 3*time.Second) }, 300 * time.Millisecond, storage.Retryable, "storage_timeout"},
		{"slow, in parts", 12 << 20, 5 << 20, func(*testing.T, string) { p.SlowCopies(1, 3*time.Second) }, 300 * time.Millisecond, storage.Retryable, "storage_timeout"},
		{"source replaced mid-copy", 12 << 20, 5 << 20, func(t *testing.T, src string) {
			// The first part waits at the proxy while the source is
			// replaced behind it: that part, sent after, must not copy
			// from the new object.
			p.SlowCopies(1, 2*time.Second)
			replaced := make(chan error, 1)
			time.AfterFunc(300*time.Millisecond, func() {
				data := make([]byte, 12<<20)
				_, _ = rand.Read(data)
				_, err := b.Client.PutObject(context.Background(), b.Name, src, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{})
				replaced <- err
			})
			t.Cleanup(func() {
				if err := <-replaced; err != nil {
					t.Errorf("replacing the source: %v", err)
				}
			})
		}, 30 * time.Second, storage.Final, "storage_rejected"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Cleanup(func() { p.DenyCopies(false); p.SlowCopies(0, 0) })
			c := storage.NewClient(storage.Options{HeaderTimeout: 5 * time.Second})
			if tc.partSize != 0 {
				c.CopyPartSize = tc.partSize
			}
			src, dst := "out/.euterpe-attempt-1/"+tc.name, "out/"+tc.name
			putStaged(t, b, src, tc.size)
			tc.fault(t, src)
			start := time.Now()
			err := c.Copy(ctx, bucket, src, dst, creds(b), storage.CopyDeadline(time.Now().Add(tc.deadline)))
			var se *storage.Error
			if !errors.As(err, &se) || se.Class() != tc.class || se.ErrorCode() != tc.code {
				t.Fatalf("got %v (class %v), want class %v, code %s", err, classOf(err), tc.class, tc.code)
			}
			if d := time.Since(start); d > tc.deadline+2*time.Second {
				t.Fatalf("copy took %v past a %v deadline", d, tc.deadline)
			}
			if bytes.Contains([]byte(err.Error()), []byte(b.SecretKey)) {
				t.Fatal("error leaks the secret")
			}
			// Let a request the proxy still holds run out before looking.
			time.Sleep(100 * time.Millisecond)
			absent(t, b, dst)
			if n := incompleteUploads(t, b, dst); n != 0 {
				t.Fatalf("%d incomplete uploads left at %s", n, dst)
			}
		})
	}
}

// TestCopyStatHonoursDeadline: the source's stat that starts a copy stalls
// (a storage server slow to answer a HEAD). The copy's own deadline ends it
// as a retryable storage_timeout, the caller's deadline or cancellation as
// a final failure, each without waiting for the server's answer (the
// transport's response-header timeout is far longer), and no copy request
// is sent after it: nothing lands at the destination past the bound.
// (minio-go's ComposeObject stats with context.Background(): the copy took
// as long as the stall.)
func TestCopyStatHonoursDeadline(t *testing.T) {
	b := testsvc.S3(t)
	p := storagetest.New(t, b.Endpoint)
	c := storage.NewClient(storage.Options{HeaderTimeout: 10 * time.Second})
	bucket := storage.Bucket{Endpoint: p.URL, Region: b.Region, Name: b.Name}
	const src = "out/.euterpe-attempt-1/a.opus"
	putStaged(t, b, src, 64<<10)
	const bound = 300 * time.Millisecond
	cases := []struct {
		name  string
		ctx   func() (context.Context, context.CancelFunc)
		copy  time.Duration // the CopyDeadline, from the start
		class storage.Class
		code  string // "": not checked
	}{
		{"copy's deadline", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			bound, storage.Retryable, "storage_timeout"},
		{"caller's deadline", func() (context.Context, context.CancelFunc) { return context.WithTimeout(context.Background(), bound) },
			time.Minute, storage.Final, ""},
		{"caller cancels", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(bound, cancel)
			return ctx, cancel
		}, time.Minute, storage.Final, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dst := "out/" + tc.name
			p.SlowStats(1, 4*time.Second)
			t.Cleanup(func() { p.SlowStats(0, 0) })
			copies := p.Copies()
			ctx, cancel := tc.ctx()
			defer cancel()
			start := time.Now()
			err := c.Copy(ctx, bucket, src, dst, creds(b), storage.CopyDeadline(start.Add(tc.copy)))
			elapsed := time.Since(start)
			var se *storage.Error
			if !errors.As(err, &se) || se.Class() != tc.class || (tc.code != "" && se.ErrorCode() != tc.code) {
				t.Fatalf("got %v (class %v, code %s), want class %v, code %q", err, classOf(err), codeOf(err), tc.class, tc.code)
			}
			if elapsed > bound+2*time.Second {
				t.Fatalf("copy returned after %v, %v past its bound: the stat ignored it", elapsed, elapsed-bound)
			}
			if n := p.Copies() - copies; n != 0 {
				t.Fatalf("%d copy requests sent after the stat was cut", n)
			}
			absent(t, b, dst)
		})
	}
}

func codeOf(err error) string {
	var se *storage.Error
	if !errors.As(err, &se) {
		return ""
	}
	return se.ErrorCode()
}
