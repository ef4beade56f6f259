package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Redrive takes at most MaxRedriveEventIDs event ids: the cap itself is
// redriven, one more — and a set past either engine's parameter limit — is a
// *TooManyEventIDsError that names the cap, and changes nothing.
func TestRedriveEventIDCap(t *testing.T) {
	cases := []struct {
		name    string
		ids     int
		refused bool
	}{
		{"one", 1, false},
		{"at the cap", MaxRedriveEventIDs, false},
		{"one over the cap", MaxRedriveEventIDs + 1, true},
		{"past SQLite's parameter limit", 32767, true},
		{"past Postgres's parameter limit", 65536, true},
	}
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		f := newFixture(t, db)
		st := NewStore(db, nil)
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				dead := f.addEvent(t, "job_"+uuid.NewString(), 1, "http://127.0.0.1:9/hook")
				_, err := db.ExecContext(ctx, db.Rebind(`UPDATE job_outbox_events SET status = 'dead_letter', dead_lettered_at = ? WHERE event_id = ?`),
					sqldb.Micros(time.Now()), dead)
				require.NoError(t, err)
				ids := []string{dead}
				for len(ids) < tc.ids {
					ids = append(ids, "evt_"+uuid.NewString())
				}
				n, err := st.Redrive(ctx, RedriveFilter{EventIDs: ids})
				if !tc.refused {
					require.NoError(t, err)
					require.EqualValues(t, 1, n)
					require.Equal(t, "pending", f.row(t, dead).Status)
					return
				}
				require.ErrorIs(t, err, ErrTooManyEventIDs)
				var tm *TooManyEventIDsError
				require.ErrorAs(t, err, &tm)
				require.Equal(t, tc.ids, tm.Count)
				require.Contains(t, err.Error(), "at most 1000")
				require.Zero(t, n)
				require.Equal(t, "dead_letter", f.row(t, dead).Status, "a refused redrive changed an event")
			})
		}
	})
}

func TestCheckRedriveEventIDs(t *testing.T) {
	for _, tc := range []struct {
		n  int
		ok bool
	}{{0, true}, {MaxRedriveEventIDs, true}, {MaxRedriveEventIDs + 1, false}} {
		err := CheckRedriveEventIDs(make([]string, tc.n))
		if tc.ok {
			require.NoError(t, err, tc.n)
		} else {
			require.ErrorIs(t, err, ErrTooManyEventIDs, tc.n)
		}
	}
}
