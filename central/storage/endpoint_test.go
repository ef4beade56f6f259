package storage_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/vesta-cx/euterpe/central/storage"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// TestUnusableEndpointIsFinal: an endpoint the client can never use as
// written (a path, query or userinfo minio-go would silently drop, a scheme
// other than http(s)) fails the same way on every try, so it is a final
// invalid_endpoint naming the problem, not a retryable network error that
// spends the job's attempts with backoff. Nothing is sent, not even to the
// endpoint's host with the path dropped.
func TestUnusableEndpointIsFinal(t *testing.T) {
	b := testsvc.S3(t)
	putRandom(t, b, "base/in.bin", 1<<10)
	c := storage.NewClient(storage.Options{HeaderTimeout: 5 * time.Second})
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "out.bin")
	if err := os.WriteFile(path, []byte("output"), 0o600); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(b.Endpoint, "http://")
	for _, ep := range []string{
		"http://user:pass@" + host,
		b.Endpoint + "/base",
		b.Endpoint + "/?x=1",
		"ftp://" + host,
	} {
		bucket := storage.Bucket{Endpoint: ep, Region: b.Region, Name: b.Name}
		var sink bytes.Buffer
		_, ferr := c.Fetch(ctx, storage.Source{Bucket: bucket, Key: "in.bin"}, creds(b), &sink, 0)
		_, uerr := c.Upload(ctx, bucket, "out.bin", path, "audio/ogg", creds(b))
		cerr := c.Copy(ctx, bucket, "in.bin", "copy.bin", creds(b))
		for op, err := range map[string]error{"fetch": ferr, "upload": uerr, "copy": cerr} {
			se, ok := err.(*storage.Error)
			if !ok || se.Class() != storage.Final || se.ErrorCode() != "invalid_endpoint" {
				t.Errorf("%s via %q: got %v, want a final invalid_endpoint", op, ep, err)
			}
		}
		if sink.Len() != 0 {
			t.Errorf("fetch via %q read %d bytes", ep, sink.Len())
		}
	}
	for _, key := range []string{"out.bin", "copy.bin"} {
		if _, err := b.Client.StatObject(ctx, b.Name, key, minioStat); err == nil {
			t.Errorf("%s written", key)
		}
	}
}

var minioStat = minio.StatObjectOptions{}
