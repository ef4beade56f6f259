package lease

import (
	"context"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// The reclaim runs inside every claim's write transaction, so on SQLite it
// must search the lease index, never scan the table: a queue with a single
// leased status (the outbox's 'delivering', the pipeline's 'running') once
// wrote "status IN ('delivering')", which SQLite does not match to a partial
// index "WHERE status = 'delivering'", and every claim scanned every event
// ever written.
func TestReclaimUsesThePartialLeaseIndex(t *testing.T) {
	const schema = `-- +goose Up
CREATE TABLE ev (id TEXT PRIMARY KEY, status TEXT NOT NULL, worker_id TEXT, lease_expires_at BIGINT,
    heartbeat_at BIGINT, claim_version BIGINT NOT NULL DEFAULT 0);
CREATE INDEX ev_lease ON ev (lease_expires_at) WHERE status = 'delivering';
CREATE TABLE job (id TEXT PRIMARY KEY, status TEXT NOT NULL, worker_id TEXT, lease_expires_at BIGINT,
    heartbeat_at BIGINT, claim_version BIGINT NOT NULL DEFAULT 0);
CREATE INDEX job_lease ON job (lease_expires_at) WHERE status IN ('claimed', 'running');
`
	db := sqltest.Open(t, sqldb.SQLite, sqldb.Migrations{SQLite: fstest.MapFS{"00001_ev.sql": {Data: []byte(schema)}}})
	for _, tc := range []struct {
		table  string
		leased []string
	}{
		{"ev", []string{"delivering"}},
		{"job", []string{"claimed", "running"}},
	} {
		q := &Queue{DB: db, Spec: Spec{Table: tc.table, ID: "id", Status: "status", WorkerID: "worker_id",
			LeaseExpires: "lease_expires_at", HeartbeatAt: "heartbeat_at", ClaimVersion: "claim_version",
			Ready: "pending", Claimed: tc.leased[0], Leased: tc.leased, Requeue: "pending"},
			Machine: Transitions{Machine: tc.table, Allowed: map[string][]string{
				"pending": {tc.leased[0]}, "claimed": {"running", "pending"}, "running": {"pending"}, "delivering": {"pending"}}}}
		if err := q.build(); err != nil {
			t.Fatal(err)
		}
		sel := q.reclaimSQL[strings.Index(q.reclaimSQL, "SELECT"):strings.LastIndex(q.reclaimSQL, ")")]
		rows, err := db.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+sel, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		if p := strings.Join(plan, "; "); !strings.Contains(p, "USING INDEX "+tc.table+"_lease") || strings.Contains(p, "SCAN "+tc.table) {
			t.Errorf("%s: reclaim %q plans %q, want a search of %s_lease", tc.table, sel, p, tc.table)
		}
	}
}
