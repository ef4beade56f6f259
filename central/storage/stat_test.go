package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/storage"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// TestStat: Stat reads an object's size and ETag, and Last-Modified no
// earlier than the write; a copy has its source's ETag and a time of its
// own; a missing key is NotFound.
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
	if src.Size != 64<<10 || src.ETag == "" || src.LastModified.Before(before) {
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
	if dst.ETag != src.ETag || !dst.LastModified.After(src.LastModified) {
		t.Fatalf("copy %+v of %+v: want the ETag, a later time", dst, src)
	}
	if _, err := c.Stat(ctx, bucket, "out/missing.opus", creds(b)); !storage.NotFound(err) {
		t.Fatalf("missing key: %v, want NotFound", err)
	}
}
