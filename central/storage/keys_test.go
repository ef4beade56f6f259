package storage_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/vesta-cx/euterpe/central/storage"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// TestDotSegmentKeysRefused: versitygw resolves "." and ".." segments of a
// key as a path ("jobs/j1/../x.bin" is stored as "jobs/x.bin"), so a write
// to such a key lands outside the prefix it names. Upload, Copy and Remove
// refuse them, final, before any request is sent.
func TestDotSegmentKeysRefused(t *testing.T) {
	b := testsvc.S3(t)
	c := storage.NewClient(storage.Options{HeaderTimeout: 5 * time.Second})
	ctx := context.Background()
	bucket := storage.Bucket{Endpoint: b.Endpoint, Region: b.Region, Name: b.Name}
	path := filepath.Join(t.TempDir(), "out.bin")
	if err := os.WriteFile(path, []byte("output"), 0o600); err != nil {
		t.Fatal(err)
	}
	putRandom(t, b, "jobs/j1/staged.bin", 1<<10)
	check := func(what string, err error) {
		t.Helper()
		var se *storage.Error
		if !errors.Is(err, storage.ErrInvalidKey) || !errors.As(err, &se) || se.Class() != storage.Final || se.ErrorCode() != "invalid_key" {
			t.Errorf("%s: got %v, want a final invalid_key", what, err)
		}
	}
	for _, key := range []string{"jobs/j1/../escaped.bin", "jobs/./j1/x.bin", "../x.bin", "jobs/j1/.."} {
		_, err := c.Upload(ctx, bucket, key, path, "audio/ogg", creds(b))
		check("upload "+key, err)
		check("copy to "+key, c.Copy(ctx, bucket, "jobs/j1/staged.bin", key, creds(b)))
		check("copy from "+key, c.Copy(ctx, bucket, key, "jobs/j1/final.bin", creds(b)))
		check("remove "+key, c.Remove(ctx, bucket, key, creds(b)))
	}
	for o := range b.Client.ListObjects(ctx, b.Name, minio.ListObjectsOptions{Recursive: true}) {
		if o.Key != "jobs/j1/staged.bin" {
			t.Errorf("object written: %q", o.Key)
		}
	}
	for _, key := range []string{"jobs/j1/.euterpe-attempt-1/o.ogg", "a..b/c", "x/...", "plain.bin"} {
		if err := storage.CheckKey(key); err != nil {
			t.Errorf("CheckKey(%q) = %v, want nil", key, err)
		}
	}
}
