package outbox

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// TestShutdownReleasesUnsentEvents: events claimed when shutdown has begun
// are returned to pending with their attempt given back, not sent, even
// while send slots are free (a select between a free slot and the ended
// context must not pick the send).
func TestShutdownReleasesUnsentEvents(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db)
		rc := newReceiver(t, nil)
		cfg := testConfig()
		cfg.Batch = 20
		d, err := New(cfg, Options{Store: NewStore(db, nil), Secrets: &RequesterSecrets{Requesters: requesters.New(db, f.keys)},
			Worker: "w", Log: slog.New(slog.NewJSONHandler(f.logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		const n = 20
		ids := make([]string, n)
		for i := range ids {
			ids[i] = f.addEvent(t, "job_"+strconv.Itoa(i), 1, rc.URL)
		}
		d.records = make(chan recordReq, maxRecordBatch)
		recDone := make(chan struct{})
		go func() { defer close(recDone); d.recorder(context.Background()) }()
		events, err := d.store.Claim(context.Background(), "w", n, cfg.LeaseTTL)
		if err != nil || len(events) != n {
			t.Fatalf("claim: %d %v", len(events), err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		sends := make(chan struct{}, n) // every slot free
		for _, e := range events {
			d.handle(ctx, e, sends)
		}
		close(d.records)
		<-recDone
		if got := len(rc.receipts()); got != 0 {
			t.Fatalf("%d events sent after shutdown began", got)
		}
		now := sqldb.Micros(time.Now().Add(time.Second))
		for _, id := range ids {
			if r := f.row(t, id); r.Status != "pending" || r.Attempts != 0 || r.Next > now {
				t.Fatalf("event %s after shutdown: %+v", id, r)
			}
		}
	})
}
