package storage_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/storage"
)

// silentServer accepts connections and never answers: a storage server
// that hangs. It is closed when the test ends.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// TestTimeoutsAreRetryable: a server that accepts the connection and never
// answers makes the request time out (the transport's response-header
// timeout, which matches context.DeadlineExceeded); that is a retryable
// storage failure (contract §5), not a final one. Only the caller's own
// context ending is final.
func TestTimeoutsAreRetryable(t *testing.T) {
	ep := silentServer(t)
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
