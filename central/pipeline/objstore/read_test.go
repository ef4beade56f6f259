package objstore

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// Get reads back what Put wrote and refuses every ref that is not an
// object of the store.
func TestDirGet(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	d := Dir{Path: filepath.Join(base, "reports")}
	ref, _, err := d.Put(ctx, "edge_daily/e1/2026-01-02.json", []byte(`{"a":1}`), "")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := d.Get(ctx, ref); err != nil || string(b) != `{"a":1}` {
		t.Fatalf("get: %q %v", b, err)
	}
	secret := filepath.Join(base, "secret.txt")
	if err := os.WriteFile(secret, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(d.Path, "edge_daily", "link.json")); err != nil {
		t.Fatal(err)
	}
	fileRef := func(p string) string { return (&url.URL{Scheme: "file", Path: p}).String() }
	cases := []struct {
		name, ref string
		want      error
	}{
		{"outside the directory", fileRef(secret), ErrForeignRef},
		{"climbing out", fileRef(filepath.Join(d.Path, "..", "secret.txt")), ErrForeignRef},
		{"raw dot-dot", "file://" + d.Path + "/../secret.txt", ErrForeignRef},
		{"another scheme", "s3://bucket/edge_daily/e1/2026-01-02.json", ErrForeignRef},
		{"not a url", "%zz", ErrForeignRef},
		{"the directory itself", fileRef(d.Path), ErrForeignRef},
	}
	for _, c := range cases {
		if _, err := d.Get(ctx, c.ref); !errors.Is(err, c.want) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// A symlink inside that points out is refused by the os.Root.
	if b, err := d.Get(ctx, fileRef(filepath.Join(d.Path, "edge_daily", "link.json"))); err == nil || strings.Contains(string(b), "secret") {
		t.Fatalf("symlink out: %q %v", b, err)
	}
	big := strings.Repeat("x", MaxGet+1)
	ref, _, err = d.Put(ctx, "big.json", []byte(big), "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Get(ctx, ref); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("too large: %v", err)
	}
}

func TestS3Get(t *testing.T) {
	ctx := context.Background()
	b := testsvc.S3(t)
	s, err := NewS3("s3://"+b.Name+"/reports?endpoint="+b.Endpoint+"&region="+b.Region, Credentials{AccessKeyID: b.AccessKey, SecretAccessKey: b.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	ref, _, err := s.Put(ctx, "edge_daily/e1/2026-01-02.json", []byte(`{"a":1}`), "application/json")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, ref); err != nil || string(got) != `{"a":1}` {
		t.Fatalf("get: %q %v", got, err)
	}
	for _, bad := range []string{
		"s3://" + b.Name + "/other/edge_daily/e1/2026-01-02.json",
		"s3://another/reports/edge_daily/e1/2026-01-02.json",
		"s3://" + b.Name + "/reports/../x.json",
		"file:///etc/passwd",
	} {
		if _, err := s.Get(ctx, bad); !errors.Is(err, ErrForeignRef) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
