package ingest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/sync/wire"
)

// Job pages followed to the end list every job once, newest first, while
// events keep arriving: a job not listed yet that gets an event between
// two pages (its last_ts rising past every other job's) is still listed,
// and a job already listed that does is not listed again.
func TestJobPagesSkipNoJobThatChangesMeanwhile(t *testing.T) {
	eachEngine(t, func(t *testing.T, url string) {
		db := openURL(t, url)
		s := startServer(t, db)
		edge, secret := s.register("jetson-1")
		const base = int64(1700000000000)
		send := func(evs []wire.Event) {
			t.Helper()
			now := time.Now()
			if res := s.send(sign(t, wire.Batch{EdgeID: edge, SentAt: now, Events: evs}, secret, now)); res.status != 200 {
				t.Fatalf("batch: %d %s", res.status, res.body)
			}
		}
		var evs []wire.Event
		for j := range 6 {
			evs = append(evs, events(edge, fmt.Sprintf("job-%d", j), base+int64(j)*1000, "queued", "running")...)
		}
		send(evs)
		var seen []string
		cursor := ""
		for page := 0; page < 10; page++ {
			var p struct {
				Jobs       []JobView
				NextCursor string `json:"next_cursor"`
			}
			if res := s.get("/v1/edges/"+edge+"/jobs?limit=2&cursor="+cursor, &p); res.status != 200 {
				t.Fatalf("jobs: %d %s", res.status, res.body)
			}
			for _, j := range p.Jobs {
				seen = append(seen, j.JobID)
			}
			if cursor = p.NextCursor; cursor == "" {
				break
			}
			// Between pages: the oldest job (not listed yet) and the
			// newest (listed) are still running and write output.
			at := base + int64(page+1)*100000
			send(append(events(edge, "job-0", at, "delta"), events(edge, "job-5", at+10, "delta")...))
		}
		if got := strings.Join(seen, ","); got != "job-5,job-4,job-3,job-2,job-1,job-0" {
			t.Fatalf("pages listed %s", got)
		}
	})
}
