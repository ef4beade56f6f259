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

// TestFetchSourceReplacedAfterStat: the requester replaces the source
// between the download's stat and its GET, which is conditioned on the
// ETag the stat saw and answered 412. That is a retryable source_changed:
// the next try stats the new object and downloads it whole (fails without:
// final, storage_rejected, and the job failed on its first attempt).
func TestFetchSourceReplacedAfterStat(t *testing.T) {
	b := testsvc.S3(t)
	putRandom(t, b, "in/src.wav", 64<<10)
	p := storagetest.New(t, b.Endpoint)
	c := storage.NewClient(storage.Options{HeaderTimeout: 5 * time.Second})
	ctx := context.Background()
	src := storage.Source{Bucket: storage.Bucket{Endpoint: p.URL, Region: b.Region, Name: b.Name}, Key: "in/src.wav"}

	replacement := make([]byte, 96<<10)
	_, _ = rand.Read(replacement)
	var putErr error
	p.BeforeGets(1, func() {
		_, putErr = b.Client.PutObject(ctx, b.Name, "in/src.wav", bytes.NewReader(replacement), int64(len(replacement)), minio.PutObjectOptions{})
	})
	_, err := c.Fetch(ctx, src, creds(b), io.Discard, 0)
	if putErr != nil {
		t.Fatalf("replacing the source: %v", putErr)
	}
	var se *storage.Error
	if !errors.As(err, &se) || se.Class() != storage.Retryable || se.ErrorCode() != "source_changed" {
		t.Fatalf("got %v (class %v), want retryable source_changed", err, classOf(err))
	}

	var got bytes.Buffer
	if n, err := c.Fetch(ctx, src, creds(b), &got, 0); err != nil || n != int64(len(replacement)) || !bytes.Equal(got.Bytes(), replacement) {
		t.Fatalf("the next try: n=%d err=%v, want the replacement whole", n, err)
	}
}
