package pipeline

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// errCut is the connection dropping while a result is being read.
var errCut = io.ErrUnexpectedEOF

// cutConn is a real connection whose reads of the schedule marks end
// with errCut after the first row, as a connection lost halfway through a
// result would.
type cutConn struct{ driver.Conn }

func (c cutConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
	if err != nil || !strings.Contains(q, "FROM pipeline_schedule_runs") {
		return rows, err
	}
	return &cutRows{Rows: rows}, nil
}

type cutRows struct {
	driver.Rows
	n int
}

func (r *cutRows) Next(dest []driver.Value) error {
	if r.n++; r.n > 1 {
		return errCut
	}
	return r.Rows.Next(dest)
}

// cutDB is a handle on db's database whose schedule-mark reads are cut.
func cutDB(t *testing.T, db *sqldb.DB) *sqldb.DB {
	return wrapDB(t, db, func(c driver.Conn) driver.Conn { return cutConn{c} })
}

// TestSchedulerCutMarksRead: a read of the schedule marks cut off halfway
// (the connection lost after the first row) is the queue being
// unavailable, not a shorter list of marks: RunOnce stops with
// QUEUE_UNAVAILABLE before it asks for symbols or schedules anything, and
// the next tick reads again.
func TestSchedulerCutMarksRead(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		clk := newClock(time.Date(2026, 3, 10, 3, 0, 0, 0, time.UTC))
		f := newFixture(t, db, clk.Now)
		entry := func(asked *atomic.Int64) []ScheduleEntry {
			return []ScheduleEntry{{JobType: "noop", Symbols: func(context.Context, time.Time) ([]string, error) {
				asked.Add(1)
				return []string{"AAA", "BBB"}, nil
			}}}
		}
		// Both days of the window are scheduled: two marks per day.
		var asked atomic.Int64
		full := &Scheduler{Store: f.store, At: 2 * time.Hour, Now: clk.Now, CatchupDays: 2, Entries: entry(&asked), Log: discardLog()}
		n, err := full.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 4, n)

		cut := NewStore(cutDB(t, db), clk.Now)
		cut.Types = f.types
		asked.Store(0)
		s := &Scheduler{Store: cut, At: 2 * time.Hour, Now: clk.Now, CatchupDays: 2, Entries: entry(&asked), Log: discardLog()}
		n, err = s.RunOnce(ctx)
		var ue *UnavailableError
		require.ErrorAs(t, err, &ue, "a cut read of the marks: %v", err)
		require.Equal(t, CodeQueueUnavailable, ue.Code)
		require.True(t, errors.Is(err, errCut), "the cause is kept: %v", err)
		require.Zero(t, n)
		require.Zero(t, asked.Load(), "symbols asked after a cut read")
	})
}
