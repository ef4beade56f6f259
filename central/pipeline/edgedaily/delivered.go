package edgedaily

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/vesta-cx/euterpe/central/pipeline"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// checkDelivered fails with UPSTREAM_INCOMPLETE (retried) while the edge
// may still hold events stamped before end (edge clock, Unix ms): central
// or the uplink down across the slot leaves the day in the edge's spool,
// and a report of what has arrived so far would stand for good (a
// succeeded job holds the key). The edge ships in capture order, so the
// day has been delivered once either
//   - an event stamped at or after end has arrived: everything captured
//     before it was sent first; or
//   - a heartbeat sent at or after end reports a spool empty or holding
//     nothing stamped before end.
//
// An edge central has never heard from passes: no event of it can arrive
// that is not already owed, and its day is UPSTREAM_EMPTY as before.
func checkDelivered(ctx context.Context, db *sqldb.DB, edge string, end int64) error {
	var seen sql.NullInt64
	var status sql.NullString
	err := db.QueryRowContext(ctx, db.Rebind(`SELECT last_seen_at, last_status FROM edges WHERE id = ?`), edge).Scan(&seen, &status)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && !seen.Valid) {
		return nil
	}
	if err != nil {
		return pipeline.Fail(pipeline.CodeRepoUnavailable, "reading the edge: "+err.Error())
	}
	var later int
	err = db.QueryRowContext(ctx, db.Rebind(`SELECT 1 FROM edge_events WHERE edge_id = ? AND ts >= ? LIMIT 1`), edge, end).Scan(&later)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, sql.ErrNoRows):
		return pipeline.Fail(pipeline.CodeRepoUnavailable, "reading edge events: "+err.Error())
	}
	heartbeat := "no heartbeat"
	if status.Valid {
		var st wire.Status
		if json.Unmarshal([]byte(status.String), &st) == nil && !st.SentAt.IsZero() {
			sent := st.SentAt.UnixMilli()
			if sent >= end && (st.Spool.OldestTS == 0 || st.Spool.OldestTS >= end) {
				return nil
			}
			heartbeat = fmt.Sprintf("last heartbeat sent %s", st.SentAt.UTC().Format(time.RFC3339))
			if st.Spool.OldestTS > 0 {
				heartbeat += fmt.Sprintf(" with %d events spooled, the oldest stamped %s", st.Spool.Events,
					time.UnixMilli(st.Spool.OldestTS).UTC().Format(time.RFC3339))
			}
		}
	}
	return pipeline.Fail(pipeline.CodeUpstreamIncomplete, fmt.Sprintf(
		"edge %s has not yet delivered past %s: no event stamped since, %s; retried until it has",
		edge, time.UnixMilli(end).UTC().Format(time.RFC3339), heartbeat))
}
