package ship

import (
	"context"
	"database/sql"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/sync/ship/shiptest"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// Central answered and the spool cannot record the answer (a failing SD
// card, a full disk): the batch stays and is sent again, and central
// answers it the same way. For as long as the spool keeps failing, the
// resends back off like any other failure and the failure is logged once,
// rather than the same megabyte going out twice a second over a metered
// link, silently.
func TestSpoolThatCannotRecordAnAnswerBacksOff(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refuse  bool   // central refuses every batch (400 invalid_batch)
		trigger string // what fails in the spool
		act     action
	}{
		{"accepted", false, `BEFORE DELETE ON events`, actAccepted},
		{"refused", true, `BEFORE INSERT ON quarantine`, actQuarantine},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 64<<20, func(c *Config) {
				c.BackoffBase, c.BackoffMax = 100*time.Millisecond, 800*time.Millisecond
				c.Rand = func() float64 { return 0.999 }
			})
			if tc.refuse {
				h.rc.SetHook(func(w http.ResponseWriter, r *http.Request, _ int) bool {
					if r.URL.Path != wire.BatchPath {
						return false
					}
					shiptest.Refuse(w, http.StatusBadRequest, wire.CodeInvalidBatch)
					return true
				})
			}
			ctx := context.Background()
			h.jobs(2, 1, `{}`)
			_, err := h.sh.MoveOnce(ctx)
			require.NoError(t, err)

			db, err := sql.Open("sqlite", sqldb.SQLiteDSN(h.path))
			require.NoError(t, err)
			defer db.Close()
			_, err = db.ExecContext(ctx, `CREATE TRIGGER fail_spool `+tc.trigger+` BEGIN SELECT RAISE(FAIL, 'disk I/O error'); END`)
			require.NoError(t, err)

			var waits []time.Duration
			for i := 0; len(waits) < 5; i++ {
				require.Less(t, i, 50)
				r := h.sh.SendOnce(ctx)
				if r.Action == actSplit {
					continue
				}
				require.Equal(t, tc.act, r.Action)
				require.Error(t, r.Err)
				waits = append(waits, r.Wait.Round(10*time.Millisecond))
			}
			assert.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
				800 * time.Millisecond, 800 * time.Millisecond}, waits)
			assert.Equal(t, 1, strings.Count(h.logs.String(), "cannot record central's answer"), "logged once:\n%s", h.logs)

			_, err = db.ExecContext(ctx, `DROP TRIGGER fail_spool`)
			require.NoError(t, err)
			r := h.sh.SendOnce(ctx)
			require.Equal(t, tc.act, r.Action)
			require.NoError(t, r.Err)
			assert.Zero(t, r.Wait)
		})
	}
}

// A corrupt spool file set aside at open is said once, at error level,
// with both names, and the edge goes on shipping with the fresh spool.
func TestCorruptSpoolIsLoggedAndShippingGoesOn(t *testing.T) {
	h := newHarness(t, 64<<20, nil)
	require.NoError(t, h.sh.Spool().Close())
	require.NoError(t, os.WriteFile(h.path, []byte(strings.Repeat("not a database ", 300)), 0o600))
	h.sh = h.open(64<<20, nil)
	aside := h.sh.Spool().SetAside()
	require.NotEmpty(t, aside)
	assert.Equal(t, 1, strings.Count(h.logs.String(), "level=ERROR msg=\"sync: the spool file was corrupt"), "%s", h.logs)
	assert.Contains(t, h.logs.String(), aside)
	want := h.written(h.jobs(2, 1, `{}`))
	h.drain()
	assert.Equal(t, want, h.rc.Events())
}
