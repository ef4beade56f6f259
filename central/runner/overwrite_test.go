package runner_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/schema"
)

// TestOutputCannotReplaceSource: a job whose source object is one of the
// keys its outputs are written to (the final key, or where an attempt of
// it stages it, in this release's form or the one before, which a runner
// not yet upgraded still uses) would overwrite the requester's source, and
// a retry would transcode the output it had written. Such a job fails for
// good before anything is fetched or written, however the same endpoint
// is spelled.
func TestOutputCannotReplaceSource(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		cases := []struct {
			name, key, prefix string // a %s in key is the job's id
			endpoint          func(string) string
		}{
			{"final key", "in/o.ogg", "in/", nil},
			{"final key, prefix without slash", "in/o.ogg", "in", nil},
			{"final key, endpoint spelled otherwise", "in/o.ogg", "in/", func(ep string) string { return strings.ToUpper(ep) + "/" }},
			{"staging key", "out/.euterpe-attempt-%s-1/o.ogg", "out/", nil},
			{"staging key of a later attempt", "out/.euterpe-attempt-%s-7/o.ogg", "out", nil},
			{"staging key without the job", "out/.euterpe-attempt-1/o.ogg", "out/", nil},
			{"staging key without the job, later attempt", "out/.euterpe-attempt-7/o.ogg", "out", nil},
		}
		for _, tc := range cases {
			var key, before string
			id := e.enqueue("", oneOpus, func(j *inbox.NewJob) {
				key = tc.key
				if strings.Contains(key, "%s") {
					key = fmt.Sprintf(key, j.ID)
				}
				e.putWAV(key, 1)
				before = e.objectSHA256(key)
				j.Source.Key = key
				j.Output.Prefix = tc.prefix
				if tc.endpoint != nil {
					j.Output.Endpoint = tc.endpoint(j.Output.Endpoint)
				}
			})
			gets := e.proxy.Requests("GET")
			v := e.drive(e.runner(nil), id, 30*time.Second)
			if got := e.objectSHA256(key); got != before {
				t.Errorf("%s: the source %s was replaced (sha256 %s, was %s); job %s", tc.name, key, got, before, v.Status)
			}
			if v.Status != schema.StatusFailed || v.AttemptCount != 1 || v.LastError == nil || v.LastError.Code != "output_replaces_source" {
				t.Errorf("%s: status %s attempts %d err %+v, want failed / output_replaces_source after one attempt", tc.name, v.Status, v.AttemptCount, v.LastError)
				continue
			}
			if !strings.Contains(v.LastError.Message, key) {
				t.Errorf("%s: message %q does not name the source key", tc.name, v.LastError.Message)
			}
			if n := e.proxy.Requests("GET"); n != gets {
				t.Errorf("%s: %d GETs sent for a job that must not run", tc.name, n-gets)
			}
			for o := range e.s3.Client.ListObjects(context.Background(), e.s3.Name, minio.ListObjectsOptions{Recursive: true}) {
				if o.Key != key {
					t.Errorf("%s: object written: %q", tc.name, o.Key)
				}
			}
			if err := e.s3.Client.RemoveObject(context.Background(), e.s3.Name, key, minio.RemoveObjectOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		e.scratchEmpty()
	})
}

// objectSHA256 downloads key from the test bucket and returns its SHA-256
// as the runner records checksums ("sha256:<hex>"), or "missing".
func (e *env) objectSHA256(key string) string {
	e.t.Helper()
	local := filepath.Join(e.t.TempDir(), "obj")
	if err := e.s3.Client.FGetObject(context.Background(), e.s3.Name, key, local, minio.GetObjectOptions{}); err != nil {
		if minio.ToErrorResponse(err).StatusCode == 404 {
			return "missing"
		}
		e.t.Fatal(err)
	}
	return fileSHA256(e.t, local)
}
