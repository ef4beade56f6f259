package runner_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/schema"
)

// TestOutputPrefixCannotEscape: an output prefix with "." or ".." segments
// would be resolved as a path by file-system backed S3 servers (versitygw
// stores "out/j/../../elsewhere/o.ogg" at "elsewhere/o.ogg"), putting
// outputs outside the prefix the job names. Such a job fails for good
// before anything is fetched or written.
func TestOutputPrefixCannotEscape(t *testing.T) {
	eachEngine(t, func(t *testing.T, e *env) {
		e.putWAV("in/src.wav", 1)
		for _, prefix := range []string{"out/x/../../elsewhere/", "out/./x", "..", "out/x/.."} {
			id := e.enqueue("in/src.wav", oneOpus, func(j *inbox.NewJob) { j.Output.Prefix = prefix })
			gets := e.proxy.Requests("GET")
			v := e.drive(e.runner(nil), id, 30*time.Second)
			if v.Status != schema.StatusFailed || v.AttemptCount != 1 || v.LastError == nil || v.LastError.Code != "invalid_output_prefix" {
				t.Fatalf("prefix %q: status %s attempts %d err %+v", prefix, v.Status, v.AttemptCount, v.LastError)
			}
			if !strings.Contains(v.LastError.Message, "output.prefix") {
				t.Fatalf("prefix %q: message %q does not name the field", prefix, v.LastError.Message)
			}
			if n := e.proxy.Requests("GET"); n != gets {
				t.Fatalf("prefix %q: %d GETs sent for a job that cannot be written", prefix, n-gets)
			}
		}
		for o := range e.s3.Client.ListObjects(context.Background(), e.s3.Name, minio.ListObjectsOptions{Recursive: true}) {
			if o.Key != "in/src.wav" {
				t.Errorf("object written: %q", o.Key)
			}
		}
		e.scratchEmpty()
	})
}
