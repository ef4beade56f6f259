package objstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

func TestDirPutDeduplicates(t *testing.T) {
	ctx := context.Background()
	d := Dir{Path: filepath.Join(t.TempDir(), "reports")}
	ref, written, err := d.Put(ctx, "edge_daily/e1/2026-01-02.json", []byte(`{"a":1}`), "application/json")
	if err != nil || !written || !strings.HasPrefix(ref, "file:///") {
		t.Fatalf("%s %v %v", ref, written, err)
	}
	p := filepath.Join(d.Path, "edge_daily/e1/2026-01-02.json")
	st1, _ := os.Stat(p)
	time.Sleep(20 * time.Millisecond)
	if _, written, err := d.Put(ctx, "edge_daily/e1/2026-01-02.json", []byte(`{"a":1}`), ""); err != nil || written {
		t.Fatalf("same bytes written again: %v %v", written, err)
	}
	st2, _ := os.Stat(p)
	if !st1.ModTime().Equal(st2.ModTime()) || !os.SameFile(st1, st2) {
		t.Fatal("file replaced although unchanged")
	}
	if _, written, err := d.Put(ctx, "edge_daily/e1/2026-01-02.json", []byte(`{"a":2}`), ""); err != nil || !written {
		t.Fatalf("changed bytes not written: %v %v", written, err)
	}
	if b, _ := os.ReadFile(p); string(b) != `{"a":2}` {
		t.Fatalf("content %s", b)
	}
	left, _ := filepath.Glob(filepath.Join(d.Path, "edge_daily/e1/.tmp-*"))
	if len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// Keys cannot climb out, and a symlink planted inside the directory (to a
// directory or a file outside) is not followed out of it.
func TestDirAdversarial(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	_ = os.MkdirAll(outside, 0o750)
	victim := filepath.Join(outside, "victim.json")
	_ = os.WriteFile(victim, []byte("keep"), 0o640)
	d := Dir{Path: filepath.Join(base, "reports")}
	_ = os.MkdirAll(filepath.Join(d.Path, "edge_daily"), 0o750)
	for _, key := range []string{"../outside/victim.json", "edge_daily/../../outside/x", "/etc/passwd", "edge_daily//x", ".hidden/x", "a/./b", "a\\b"} {
		if _, _, err := d.Put(ctx, key, []byte("x"), ""); !errors.Is(err, ErrBadKey) {
			t.Errorf("key %q: %v", key, err)
		}
	}
	// A directory symlink to outside.
	if err := os.Symlink(outside, filepath.Join(d.Path, "edge_daily", "e1")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Put(ctx, "edge_daily/e1/victim.json", []byte("pwned"), ""); err == nil {
		t.Fatal("write through a directory symlink out of the root succeeded")
	}
	// A file symlink to outside at the key itself.
	_ = os.MkdirAll(filepath.Join(d.Path, "edge_daily", "e2"), 0o750)
	if err := os.Symlink(victim, filepath.Join(d.Path, "edge_daily", "e2", "2026-01-02.json")); err != nil {
		t.Fatal(err)
	}
	_, _, err := d.Put(ctx, "edge_daily/e2/2026-01-02.json", []byte("pwned"), "")
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Fatalf("outside file changed to %q (err %v)", b, err)
	}
	// A hard link to an outside file at the key: the write replaces the
	// link (rename), never writes into the shared inode.
	_ = os.MkdirAll(filepath.Join(d.Path, "edge_daily", "e3"), 0o750)
	if err := os.Link(victim, filepath.Join(d.Path, "edge_daily", "e3", "2026-01-02.json")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Put(ctx, "edge_daily/e3/2026-01-02.json", []byte("new"), ""); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Fatalf("hard-linked outside file changed to %q", b)
	}
}

// S3 against the real local S3 server: a second put of the same bytes
// writes nothing (the object's ETag and modification time stay).
func TestS3PutDeduplicates(t *testing.T) {
	ctx := context.Background()
	b := testsvc.S3(t)
	s, err := NewS3("s3://"+b.Name+"/reports?endpoint="+b.Endpoint+"&region="+b.Region, Credentials{AccessKeyID: b.AccessKey, SecretAccessKey: b.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	ref, written, err := s.Put(ctx, "edge_daily/e1/2026-01-02.json", []byte(`{"a":1}`), "application/json")
	if err != nil || !written || ref != "s3://"+b.Name+"/reports/edge_daily/e1/2026-01-02.json" {
		t.Fatalf("%s %v %v", ref, written, err)
	}
	st1, err := b.Client.StatObject(ctx, b.Name, "reports/edge_daily/e1/2026-01-02.json", minio.StatObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if _, written, err := s.Put(ctx, "edge_daily/e1/2026-01-02.json", []byte(`{"a":1}`), "application/json"); err != nil || written {
		t.Fatalf("rewritten: %v %v", written, err)
	}
	st2, _ := b.Client.StatObject(ctx, b.Name, "reports/edge_daily/e1/2026-01-02.json", minio.StatObjectOptions{})
	if !st1.LastModified.Equal(st2.LastModified) {
		t.Fatal("object rewritten")
	}
	if _, written, err := s.Put(ctx, "edge_daily/e1/2026-01-02.json", []byte(`{"a":2}`), "application/json"); err != nil || !written {
		t.Fatalf("changed not written: %v %v", written, err)
	}
	bad, _ := NewS3("s3://"+b.Name+"?endpoint="+b.Endpoint, Credentials{AccessKeyID: b.AccessKey, SecretAccessKey: "wrong"})
	if _, _, err := bad.Put(ctx, "x.json", []byte("x"), ""); err == nil || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("bad credentials: %v", err)
	}
}
