package api_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// TestStatusIsOKInEveryJobState: GET /transcode/status answers 200 with the
// job's status for a job in each state of the table, the working states and
// the three terminal ones alike; only an unknown job (404) or a pruned one
// (410) answers otherwise.
func TestStatusIsOKInEveryJobState(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		e := start(t, db)
		owner, err := e.reqs.Create(ctx, "owner")
		if err != nil {
			t.Fatal(err)
		}
		// Each case takes a fresh job from queued to the state under test;
		// the queued one comes last, so every claim finds only its own job.
		claimed := func(t *testing.T, id string) *inbox.Job {
			t.Helper()
			js, err := e.inbox.Claim(ctx, "w1", 1, time.Minute)
			if err != nil || len(js) != 1 || js[0].ID != id {
				t.Fatalf("claim: %v %d", err, len(js))
			}
			return js[0]
		}
		advance := func(t *testing.T, j *inbox.Job, to ...string) {
			t.Helper()
			for _, st := range to {
				if err := e.inbox.Advance(ctx, j, st); err != nil {
					t.Fatalf("advance %s: %v", st, err)
				}
			}
		}
		fail := func(t *testing.T, j *inbox.Job, class inbox.Class, want string) {
			t.Helper()
			if st, err := e.inbox.Fail(ctx, j, inbox.JobError{Class: class, Code: "x", Message: "y"}); err != nil || st != want {
				t.Fatalf("fail: %s %v, want %s", st, err, want)
			}
		}
		for _, tc := range []struct {
			status      string
			maxAttempts int
			drive       func(t *testing.T, id string)
		}{
			{schema.StatusClaimed, 0, func(t *testing.T, id string) { claimed(t, id) }},
			{schema.StatusFetching, 0, func(t *testing.T, id string) { advance(t, claimed(t, id), schema.StatusFetching) }},
			{schema.StatusProcessing, 0, func(t *testing.T, id string) {
				advance(t, claimed(t, id), schema.StatusFetching, schema.StatusProcessing)
			}},
			{schema.StatusUploading, 0, func(t *testing.T, id string) {
				advance(t, claimed(t, id), schema.StatusFetching, schema.StatusProcessing, schema.StatusUploading)
			}},
			{schema.StatusSucceeded, 0, func(t *testing.T, id string) {
				j := claimed(t, id)
				advance(t, j, schema.StatusFetching, schema.StatusProcessing, schema.StatusUploading)
				if err := e.inbox.Succeed(ctx, j, []inbox.OutputFile{{Rendition: "o", Bucket: "out", Key: "p/o.ogg"}}); err != nil {
					t.Fatal(err)
				}
			}},
			{schema.StatusFailed, 0, func(t *testing.T, id string) { fail(t, claimed(t, id), inbox.Permanent, schema.StatusFailed) }},
			{schema.StatusDeadLetter, 1, func(t *testing.T, id string) {
				fail(t, claimed(t, id), inbox.Retryable, schema.StatusDeadLetter)
			}},
			{schema.StatusQueued, 0, func(*testing.T, string) {}},
		} {
			t.Run(tc.status, func(t *testing.T) {
				id := uuid.NewString()
				err := e.inbox.Enqueue(ctx, inbox.NewJob{ID: id, RequesterID: owner.RequesterID, MaxAttempts: tc.maxAttempts,
					Source: inbox.Source{Bucket: "in", Key: "k"}, Output: inbox.Output{Bucket: "out", Prefix: "p/"},
					Renditions:  []inbox.Rendition{{Name: "o", Codec: "opus"}},
					Credentials: credentials.Storage{Source: &credentials.S3{AccessKeyID: "a", SecretAccessKey: "s"}, Output: credentials.S3{AccessKeyID: "a", SecretAccessKey: "s"}}})
				if err != nil {
					t.Fatal(err)
				}
				tc.drive(t, id)
				r := e.do(http.MethodGet, "/transcode/status?job_id="+id, owner.APIKey, "", "")
				if r.Code != http.StatusOK || r.Body["status"] != tc.status || r.Body["job_id"] != id {
					t.Fatalf("status of a %s job: %d %s", tc.status, r.Code, r.Raw)
				}
			})
		}
	})
}
