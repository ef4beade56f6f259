package api_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// TestCredentialExpiryUsesTheDatabaseClock: credentials' expires_at is
// judged on the database's time (the inbox's, corrected to the database
// clock), at enqueue and at a credentials update, never on this pod's own
// clock. The test moves the inbox's clock away from the pod's after it was
// measured, as a pod's skew would look from the database: credentials valid
// by the database are taken even though the pod's clock says they expired,
// and the other way round.
func TestCredentialExpiryUsesTheDatabaseClock(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		e := start(t, db)
		key := e.requester()
		first := e.do("POST", "/transcode", key, "measure", js(validBody()))
		if first.Code != 202 {
			t.Fatalf("enqueue: %d %s", first.Code, first.Raw)
		}
		jobID, _ := first.Body["job_id"].(string)
		// The database is an hour behind the pod: by it, credentials that
		// expired half an hour ago on the pod's clock are still valid.
		// Then it is an hour ahead: credentials valid for another half
		// hour on the pod's clock have expired.
		steps := []struct {
			name    string
			skew    time.Duration // added to the inbox's clock
			expires time.Duration // from the pod's clock
			enqueue int
			update  int
		}{
			{"database behind the pod", -time.Hour, -30 * time.Minute, 202, 200},
			{"database ahead of the pod", 2 * time.Hour, 30 * time.Minute, 400, 400},
		}
		for i, s := range steps {
			e.clock.Add(s.skew)
			exp := time.Now().Add(s.expires).UTC().Format(time.RFC3339Nano)
			b := validBody()
			for _, side := range []string{"source", "output"} {
				b[side].(map[string]any)["credentials"].(map[string]any)["expires_at"] = exp
			}
			if r := e.do("POST", "/transcode", key, fmt.Sprintf("skew-%d", i), js(b)); r.Code != s.enqueue {
				t.Errorf("%s: enqueue answered %d %s, want %d", s.name, r.Code, r.Raw, s.enqueue)
			}
			put := js(map[string]any{"source": map[string]any{"credentials": b["source"].(map[string]any)["credentials"]},
				"output": map[string]any{"credentials": b["output"].(map[string]any)["credentials"]}})
			if r := e.do("PUT", "/transcode/credentials?job_id="+jobID, key, "", put); r.Code != s.update {
				t.Errorf("%s: credentials update answered %d %s, want %d", s.name, r.Code, r.Raw, s.update)
			}
		}
	})
}
