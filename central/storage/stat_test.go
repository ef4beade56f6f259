package storage_test

import (
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/vesta-cx/euterpe/central/storage"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// TestStat: Stat reads an object's size, ETag and user metadata, and
// Last-Modified no earlier than the write; a copy has its source's ETag
// and metadata and a time of its own; a missing key is NotFound.
func TestStat(t *testing.T) {
	b := testsvc.S3(t)
	bucket := storage.Bucket{Endpoint: b.Endpoint, Region: b.Region, Name: b.Name}
	c := storage.NewClient(storage.Options{HeaderTimeout: 5 * time.Second})
	ctx := context.Background()
	before := time.Now().Add(-time.Minute) // the server's clock, not ours
	putStaged(t, b, "out/.euterpe-attempt-j-1/a.opus", 64<<10)
	src, err := c.Stat(ctx, bucket, "out/.euterpe-attempt-j-1/a.opus", creds(b))
	if err != nil {
		t.Fatal(err)
	}
	if src.Size != 64<<10 || src.ETag == "" || src.LastModified.Before(before) || src.Metadata["origin"] != "euterpe" {
		t.Fatalf("stat %+v", src)
	}
	time.Sleep(1100 * time.Millisecond) // Last-Modified has whole seconds
	if err := c.Copy(ctx, bucket, "out/.euterpe-attempt-j-1/a.opus", "out/a.opus", creds(b)); err != nil {
		t.Fatal(err)
	}
	dst, err := c.Stat(ctx, bucket, "out/a.opus", creds(b))
	if err != nil {
		t.Fatal(err)
	}
	if dst.ETag != src.ETag || !dst.LastModified.After(src.LastModified) || dst.Metadata["origin"] != "euterpe" {
		t.Fatalf("copy %+v of %+v: want the ETag and metadata, a later time", dst, src)
	}
	if _, err := c.Stat(ctx, bucket, "out/missing.opus", creds(b)); !storage.NotFound(err) {
		t.Fatalf("missing key: %v, want NotFound", err)
	}
}

// TestUploadMetadataKeptByCopy: metadata given to an upload, in one
// request or in parts, is on the object and on its copy, in one request or
// in parts (a multipart copy starts with no metadata of its own), as Stat
// reads it, beside the Content-Type: the runner tells its own objects by
// it where an ETag may differ.
func TestUploadMetadataKeptByCopy(t *testing.T) {
	b := testsvc.S3(t)
	bucket := storage.Bucket{Endpoint: b.Endpoint, Region: b.Region, Name: b.Name}
	c := storage.NewClient(storage.Options{HeaderTimeout: 5 * time.Second})
	c.PartSize, c.CopyPartSize = 5<<20, 5<<20
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		size int
	}{{"one request", 1 << 10}, {"in parts", 12 << 20}} {
		t.Run(tc.name, func(t *testing.T) {
			data := make([]byte, tc.size)
			_, _ = rand.Read(data)
			path := filepath.Join(t.TempDir(), "o")
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			src, dst := "out/.euterpe-attempt-j-2/"+tc.name, "out/"+tc.name
			if _, err := c.Upload(ctx, bucket, src, path, "audio/ogg", creds(b), storage.UploadMetadata(map[string]string{"euterpe-attempt": "j-2"})); err != nil {
				t.Fatal(err)
			}
			if err := c.Copy(ctx, bucket, src, dst, creds(b)); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{src, dst} {
				st, err := c.Stat(ctx, bucket, k, creds(b))
				if err != nil || st.Metadata["euterpe-attempt"] != "j-2" || st.Size != int64(tc.size) {
					t.Fatalf("%s: %+v %v, want metadata euterpe-attempt j-2", k, st, err)
				}
				raw, err := b.Client.StatObject(ctx, b.Name, k, minio.StatObjectOptions{})
				if err != nil || raw.ContentType != "audio/ogg" {
					t.Fatalf("%s: Content-Type %q %v", k, raw.ContentType, err)
				}
			}
		})
	}
}
