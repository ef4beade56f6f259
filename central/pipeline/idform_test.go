package pipeline

import (
	"context"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// A job id is a UUID, which RFC 9562 reads case-insensitively: a client
// that prints it in upper case (or another form uuid.Parse reads) names the
// job stored under its canonical lower-case form.
func TestJobIDAnyUUIDForm(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		f := newFixture(t, db, nil)
		base := apiServer(t, f)
		c := f.submit(t, "noop", "AAPL", "2026-01-02")
		for _, id := range []string{c.JobID, strings.ToUpper(c.JobID), "{" + c.JobID + "}", "urn:uuid:" + c.JobID, strings.ReplaceAll(c.JobID, "-", "")} {
			r, err := f.store.GetByID(ctx, id)
			if err != nil || r.JobID != c.JobID {
				t.Errorf("GetByID(%s): %+v %v", id, r.JobID, err)
			}
			if a := call(t, "GET", base+"/v1/pipeline/jobs/"+id); a.status != 200 {
				t.Errorf("GET %s: %d %s", id, a.status, a.code)
			}
			// Found, and refused for what it is (queued), not as unknown.
			if a := call(t, "POST", base+"/v1/pipeline/jobs/"+id+"/redrive"); a.status != 409 || a.code != "invalid_transition" {
				t.Errorf("redrive %s: %d %s", id, a.status, a.code)
			}
		}
	})
}
