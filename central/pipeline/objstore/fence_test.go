package objstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// A put whose context ended (a worker fenced at its lease deadline) writes
// nothing: the object a newer run stored stays. Both stores.
func TestPutAfterContextEndsWritesNothing(t *testing.T) {
	const key = "edge_daily/e1/2026-01-02.json"
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	ctx := context.Background()

	t.Run("dir", func(t *testing.T) {
		d := Dir{Path: filepath.Join(t.TempDir(), "reports")}
		if _, _, err := d.Put(ctx, key, []byte(`{"run":"new"}`), ""); err != nil {
			t.Fatal(err)
		}
		if _, written, err := d.Put(dead, key, []byte(`{"run":"old"}`), ""); !errors.Is(err, context.Canceled) || written {
			t.Fatalf("written %v, err %v; want context.Canceled", written, err)
		}
		if b, _ := os.ReadFile(filepath.Join(d.Path, key)); string(b) != `{"run":"new"}` {
			t.Fatalf("object is %s", b)
		}
		if _, _, err := d.Put(dead, "edge_daily/e2/2026-01-02.json", []byte("x"), ""); err == nil {
			t.Fatal("a new object written under an ended context")
		}
		if _, err := os.Stat(filepath.Join(d.Path, "edge_daily/e2")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("directory made under an ended context: %v", err)
		}
	})
	t.Run("s3", func(t *testing.T) {
		b := testsvc.S3(t)
		s, err := NewS3("s3://"+b.Name+"?endpoint="+b.Endpoint+"&region="+b.Region, Credentials{AccessKeyID: b.AccessKey, SecretAccessKey: b.SecretKey})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Put(ctx, key, []byte(`{"run":"new"}`), "application/json"); err != nil {
			t.Fatal(err)
		}
		if _, written, err := s.Put(dead, key, []byte(`{"run":"old"}`), "application/json"); !errors.Is(err, context.Canceled) || written {
			t.Fatalf("written %v, err %v; want context.Canceled", written, err)
		}
		o, err := b.Client.GetObject(ctx, b.Name, key, minio.GetObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		got, err := readCapped(o)
		if err != nil || string(got) != `{"run":"new"}` {
			t.Fatalf("object is %s (%v)", got, err)
		}
	})
}
