package ingest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// Past its bucket an edge gets 429 rate_limited with Retry-After, and the
// refused batch writes nothing; another edge is not affected.
func TestRateLimit(t *testing.T) {
	eachEngine(t, func(t *testing.T, url string) {
		db := openURL(t, url)
		s := startServer(t, db, func(s *Settings) { s.Rate, s.Burst = 1, 2 })
		edge, secret := s.register("busy")
		other, otherSecret := s.register("quiet")
		now := time.Now()
		for i := range 2 {
			b := wire.Batch{EdgeID: edge, SentAt: now, Events: events(edge, fmt.Sprintf("job-%d", i), 1700000000000, "queued")}
			if res := s.send(sign(t, b, secret, now)); res.status != 200 {
				t.Fatalf("within the burst: %d %s", res.status, res.body)
			}
		}
		before := written(t, db)
		res := s.send(sign(t, wire.Batch{EdgeID: edge, SentAt: now, Events: events(edge, "job-9", 1700000000000, "queued")}, secret, now))
		if res.status != 429 || res.code() != wire.CodeRateLimited || res.header.Get("Retry-After") != "1" {
			t.Fatalf("over the limit: %d %q %s", res.status, res.header.Get("Retry-After"), res.body)
		}
		if got := written(t, db); got != before {
			t.Fatalf("a rate-limited batch wrote: %v -> %v", before, got)
		}
		if res := s.send(sign(t, wire.Batch{EdgeID: other, SentAt: now, Events: events(other, "j", 1700000000000, "queued")}, otherSecret, now)); res.status != 200 {
			t.Fatalf("another edge: %d", res.status)
		}
	})
}

// The role prunes on its timer: data past retention and expired nonces go.
func TestRolePrunesOnItsTimer(t *testing.T) {
	sqltestEach(t, func(t *testing.T, db *sqldb.DB) {
		s := startServer(t, db, func(s *Settings) { s.Retention, s.PruneInterval = time.Hour, 50*time.Millisecond })
		reg, _ := NewRegistry(db, mustKeys(t)).Register(context.Background(), "e")
		st := NewStore(db)
		st.now = func() time.Time { return time.Now().Add(-2 * time.Hour) }
		if _, err := st.Ingest(context.Background(), wire.Batch{EdgeID: reg.EdgeID, SentAt: time.Now(), Events: events(reg.EdgeID, "j", 1, "queued", "done")}); err != nil {
			t.Fatal(err)
		}
		if err := s.role.Nonces.Remember(context.Background(), "n1", time.Now().Add(-time.Minute), time.Now().Add(-time.Hour)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.role.Run(ctx) }()
		deadline := time.Now().Add(10 * time.Second)
		for count(t, db, `SELECT COUNT(*) FROM edge_events`)+count(t, db, `SELECT COUNT(*) FROM edge_jobs`)+
			count(t, db, `SELECT COUNT(*) FROM edge_sync_nonces`) > 0 {
			if time.Now().After(deadline) {
				t.Fatal("the role did not prune")
			}
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}
