package storage_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/vesta-cx/euterpe/central/ssrf"
	"github.com/vesta-cx/euterpe/central/storage"
	"github.com/vesta-cx/euterpe/central/storage/storagetest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

func putRandom(t *testing.T, b testsvc.S3Bucket, key string, n int) []byte {
	t.Helper()
	data := make([]byte, n)
	_, _ = rand.Read(data)
	if _, err := b.Client.PutObject(context.Background(), b.Name, key, bytes.NewReader(data), int64(n), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	return data
}

func creds(b testsvc.S3Bucket) storage.Credentials {
	return storage.Credentials{AccessKeyID: b.AccessKey, SecretAccessKey: b.SecretKey}
}

func TestUploadAndFetchRoundTrip(t *testing.T) {
	b := testsvc.S3(t)
	c := storage.NewClient(storage.Options{HeaderTimeout: 5 * time.Second})
	c.PartSize = 5 << 20 // force a multipart upload for the 12 MiB file
	ctx := context.Background()
	dir := t.TempDir()
	for _, size := range []int{0, 1 << 10, 12 << 20} {
		data := make([]byte, size)
		_, _ = rand.Read(data)
		path := filepath.Join(dir, "out.bin")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		key := storage.ObjectKey("jobs/j1/", "out.bin")
		var sent atomic.Int64
		n, err := c.Upload(ctx, storage.Bucket{Endpoint: b.Endpoint, Region: b.Region, Name: b.Name}, key, path, "audio/ogg", creds(b),
			storage.OnProgress(func(n int) { sent.Add(int64(n)) }))
		if err != nil || n != int64(size) {
			t.Fatalf("upload %d: n=%d err=%v", size, n, err)
		}
		if sent.Load() != int64(size) {
			t.Fatalf("upload %d: progress reported %d bytes", size, sent.Load())
		}
		var got bytes.Buffer
		src := storage.Source{Bucket: storage.Bucket{Endpoint: b.Endpoint, Region: b.Region, Name: b.Name}, Key: key}
		n, err = c.Fetch(ctx, src, creds(b), &got, 0)
		if err != nil || n != int64(size) || !bytes.Equal(got.Bytes(), data) {
			t.Fatalf("fetch %d: n=%d err=%v equal=%v", size, n, err, bytes.Equal(got.Bytes(), data))
		}
		st, err := b.Client.StatObject(ctx, b.Name, key, minio.StatObjectOptions{})
		if err != nil || st.ContentType != "audio/ogg" {
			t.Fatalf("stat: %+v %v", st, err)
		}
	}
}

func TestFetchSignedURL(t *testing.T) {
	b := testsvc.S3(t)
	data := putRandom(t, b, "in/src.wav", 300<<10)
	u, err := b.Client.PresignedGetObject(context.Background(), b.Name, "in/src.wav", time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := storage.NewClient(storage.Options{HeaderTimeout: 5 * time.Second})
	var got bytes.Buffer
	n, err := c.Fetch(context.Background(), storage.Source{URL: u.String()}, storage.Credentials{}, &got, 1<<20)
	if err != nil || n != int64(len(data)) || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("n=%d err=%v", n, err)
	}
	// A tampered signature is an auth failure, and the error carries no query.
	bad := *u
	q := bad.Query()
	q.Set("X-Amz-Signature", "00"+q.Get("X-Amz-Signature")[2:])
	bad.RawQuery = q.Encode()
	_, err = c.Fetch(context.Background(), storage.Source{URL: bad.String()}, storage.Credentials{}, io.Discard, 0)
	if cl, _ := storage.ClassOf(err); cl != storage.Auth {
		t.Fatalf("tampered URL: %v (class %v), want auth", err, cl)
	}
	if bytes.Contains([]byte(err.Error()), []byte("Signature")) {
		t.Fatalf("error leaks the signed query: %v", err)
	}
}

// TestOversizeRejectedBeforeDownload: the declared size is checked before
// the body is read (no GET for an object, nothing written for a URL), and a
// source that does not declare its size is cut off while streaming.
func TestOversizeRejectedBeforeDownload(t *testing.T) {
	b := testsvc.S3(t)
	putRandom(t, b, "big.bin", 3<<20)
	p := storagetest.New(t, b.Endpoint)
	c := storage.NewClient(storage.Options{HeaderTimeout: 5 * time.Second})
	ctx := context.Background()
	limit := int64(1 << 20)

	src := storage.Source{Bucket: storage.Bucket{Endpoint: p.URL, Region: b.Region, Name: b.Name}, Key: "big.bin"}
	var w bytes.Buffer
	_, err := c.Fetch(ctx, src, creds(b), &w, limit)
	if !errors.Is(err, storage.ErrTooLarge) || w.Len() != 0 || p.Requests(http.MethodGet) != 0 {
		t.Fatalf("object: err=%v written=%d GETs=%d", err, w.Len(), p.Requests(http.MethodGet))
	}
	var se *storage.Error
	if !errors.As(err, &se) || se.ErrorCode() != "source_too_large" || se.Class() != storage.Final {
		t.Fatalf("object: %v", err)
	}

	u, err := b.Client.PresignedGetObject(ctx, b.Name, "big.bin", time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Fetch(ctx, storage.Source{URL: u.String()}, storage.Credentials{}, &w, limit)
	if !errors.Is(err, storage.ErrTooLarge) || w.Len() != 0 {
		t.Fatalf("url: err=%v written=%d", err, w.Len())
	}

	// No Content-Length: enforced while streaming, at most limit+1 bytes read.
	p.StripLength(true)
	pu, err := minio.New(p.URL[len("http://"):], &minio.Options{Creds: credentials.NewStaticV4(b.AccessKey, b.SecretKey, ""), Region: b.Region, BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	u, err = pu.PresignedGetObject(ctx, b.Name, "big.bin", time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.Fetch(ctx, storage.Source{URL: u.String()}, storage.Credentials{}, &w, limit)
	if !errors.Is(err, storage.ErrTooLarge) || n > limit+1 {
		t.Fatalf("chunked: n=%d err=%v", n, err)
	}
}

func TestErrorClasses(t *testing.T) {
	b := testsvc.S3(t)
	putRandom(t, b, "k", 1024)
	p := storagetest.New(t, b.Endpoint)
	c := storage.NewClient(storage.Options{HeaderTimeout: 2 * time.Second})
	ctx := context.Background()
	good := storage.Source{Bucket: storage.Bucket{Endpoint: p.URL, Region: b.Region, Name: b.Name}, Key: "k"}
	cases := []struct {
		name   string
		fault  int
		src    storage.Source
		creds  storage.Credentials
		class  storage.Class
		code   string
		status int
	}{
		{"423", 423, good, creds(b), storage.Retryable, "storage_unavailable", 423},
		{"500", 500, good, creds(b), storage.Retryable, "storage_unavailable", 500},
		{"502", 502, good, creds(b), storage.Retryable, "storage_unavailable", 502},
		{"503", 503, good, creds(b), storage.Retryable, "storage_unavailable", 503},
		{"504", 504, good, creds(b), storage.Retryable, "storage_unavailable", 504},
		{"429", 429, good, creds(b), storage.Throttled, "storage_throttled", 429},
		{"401", 401, good, creds(b), storage.Auth, "storage_auth", 401},
		{"403", 403, good, creds(b), storage.Auth, "storage_auth", 403},
		{"400", 400, good, creds(b), storage.Final, "storage_rejected", 400},
		{"wrong secret (real 403)", 0, good, storage.Credentials{AccessKeyID: b.AccessKey, SecretAccessKey: "wrong"}, storage.Auth, "storage_auth", 403},
		{"missing key (real 404)", 0, storage.Source{Bucket: good.Bucket, Key: "nope"}, creds(b), storage.Final, "source_not_found", 404},
		{"connection refused", 0, storage.Source{Bucket: storage.Bucket{Endpoint: "http://127.0.0.1:1", Name: b.Name}, Key: "k"}, creds(b), storage.Retryable, "storage_unreachable", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fault != 0 {
				p.Fail(tc.fault)
			}
			_, err := c.Fetch(ctx, tc.src, tc.creds, io.Discard, 0)
			var se *storage.Error
			if !errors.As(err, &se) {
				t.Fatalf("got %v, want *storage.Error", err)
			}
			if se.Class() != tc.class || se.ErrorCode() != tc.code || se.Status != tc.status {
				t.Fatalf("got class=%v code=%s status=%d (%v)", se.Class(), se.ErrorCode(), se.Status, err)
			}
			if bytes.Contains([]byte(err.Error()), []byte(b.SecretKey)) {
				t.Fatal("error leaks the secret")
			}
		})
	}
	// Upload failures classify the same way.
	path := filepath.Join(t.TempDir(), "o")
	_ = os.WriteFile(path, []byte("x"), 0o600)
	p.Fail(503)
	_, err := c.Upload(ctx, good.Bucket, "o", path, "audio/ogg", creds(b))
	if cl, _ := storage.ClassOf(err); cl != storage.Retryable {
		t.Fatalf("upload 503: %v", err)
	}
	_, err = c.Upload(ctx, good.Bucket, "o", path, "audio/ogg", storage.Credentials{AccessKeyID: "nobody", SecretAccessKey: "x"})
	if cl, _ := storage.ClassOf(err); cl != storage.Auth {
		t.Fatalf("upload bad key: %v", err)
	}
}

// TestRefusedDestination: with the outbound address policy in force (no
// private addresses), an endpoint or signed URL on loopback is refused
// before any request leaves; the failure is final (destination_refused),
// since every retry would be refused the same way.
func TestRefusedDestination(t *testing.T) {
	// Not a short string a random bucket name could hold by chance.
	const signature = "planted-signature-7f3e"
	b := testsvc.S3(t)
	putRandom(t, b, "k", 1024)
	p := storagetest.New(t, b.Endpoint)
	c := storage.NewClient(storage.Options{HeaderTimeout: 2 * time.Second, DialContext: ssrf.Policy{}.DialContext})
	ctx := context.Background()
	bucket := storage.Bucket{Endpoint: p.URL, Region: b.Region, Name: b.Name}
	path := filepath.Join(t.TempDir(), "o")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"object fetch", func() error {
			_, err := c.Fetch(ctx, storage.Source{Bucket: bucket, Key: "k"}, creds(b), io.Discard, 0)
			return err
		}},
		{"signed URL fetch", func() error {
			_, err := c.Fetch(ctx, storage.Source{URL: p.URL + "/" + b.Name + "/k?X-Amz-Signature=" + signature}, storage.Credentials{}, io.Discard, 0)
			return err
		}},
		{"upload", func() error {
			_, err := c.Upload(ctx, bucket, "o", path, "audio/ogg", creds(b))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			var se *storage.Error
			if !errors.As(err, &se) || !errors.Is(err, ssrf.ErrRefused) {
				t.Fatalf("got %v, want a refused *storage.Error", err)
			}
			if se.Class() != storage.Final || se.ErrorCode() != "destination_refused" || se.Status != 0 {
				t.Fatalf("got class=%v code=%s status=%d (%v)", se.Class(), se.ErrorCode(), se.Status, err)
			}
			if bytes.Contains([]byte(err.Error()), []byte(signature)) {
				t.Fatalf("error leaks the signed query: %v", err)
			}
		})
	}
	for _, m := range []string{http.MethodHead, http.MethodGet, http.MethodPut, http.MethodPost} {
		if n := p.Requests(m); n != 0 {
			t.Fatalf("%d %s requests reached storage", n, m)
		}
	}
}

func TestCredentialsNeverPrinted(t *testing.T) {
	c := storage.Credentials{AccessKeyID: "AKIA", SecretAccessKey: "s3cr3t", SessionToken: "tok"}
	for _, s := range []string{c.String(), c.GoString()} {
		if bytes.Contains([]byte(s), []byte("s3cr3t")) {
			t.Fatal(s)
		}
	}
}
