package objstore

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/vesta-cx/euterpe/central/storage/storagetest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// The stat before a write only saves the write. A 403 to it — S3's answer
// to a HEAD of a missing key for credentials without s3:ListBucket — does
// not fail the report: the object is written. An outage on the stat still
// fails the Put (retried by the worker) before anything is written.
//
// The test server runs single-tenant (root only, which no bucket policy
// binds), so the proxy in front of it gives the 403 such credentials get;
// the bucket behind it is real.
func TestS3PutWhenTheStatIsRefused(t *testing.T) {
	const key = "edge_daily/e1/2026-01-02.json"
	cases := []struct {
		name    string
		faults  []int
		timeout time.Duration
		written bool
	}{
		{"403 on the stat", []int{http.StatusForbidden}, 30 * time.Second, true},
		{"404 on the stat", []int{http.StatusNotFound}, 30 * time.Second, true},
		{"503 on the stat", repeat(http.StatusServiceUnavailable, 1000), 2 * time.Second, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := testsvc.S3(t)
			p := storagetest.New(t, b.Endpoint)
			s, err := NewS3("s3://"+b.Name+"?endpoint="+p.URL+"&region="+b.Region, Credentials{AccessKeyID: b.AccessKey, SecretAccessKey: b.SecretKey})
			if err != nil {
				t.Fatal(err)
			}
			p.Fail(c.faults...)
			ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
			defer cancel()
			ref, written, err := s.Put(ctx, key, []byte(`{"a":1}`), "application/json")
			got, gerr := b.Client.StatObject(context.Background(), b.Name, key, minio.StatObjectOptions{})
			if !c.written {
				if err == nil || written || !strings.Contains(err.Error(), "stat") {
					t.Fatalf("written %v, err %v; want the stat's error", written, err)
				}
				if n := p.Requests(http.MethodPut); n != 0 || gerr == nil {
					t.Fatalf("%d PUTs reached the server (object: %v)", n, gerr)
				}
				return
			}
			if err != nil || !written || ref != "s3://"+b.Name+"/"+key {
				t.Fatalf("ref %q written %v err %v", ref, written, err)
			}
			if gerr != nil || got.Size != int64(len(`{"a":1}`)) {
				t.Fatalf("object not stored: %+v %v", got, gerr)
			}
		})
	}
}

func repeat(status, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = status
	}
	return out
}
