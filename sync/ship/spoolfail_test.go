package ship

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/ship/shiptest"
	"github.com/vesta-cx/euterpe/sync/spool"
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

// A spool that cannot be opened (here its directory's path runs through a
// regular file; a full disk or a read-only file system fail the same way)
// is retried with backoff and logged once at error level; heartbeats go on
// and captured events wait on the capture stream. Once it opens, they are
// shipped, and Run closes the spool it opened.
func TestSpoolThatCannotBeOpenedIsRetried(t *testing.T) {
	h := newHarness(t, 64<<20, nil)
	blocker := filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.WriteFile(blocker, []byte("a file where the state directory goes"), 0o600))
	path := filepath.Join(blocker, spool.File)
	log := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sh, err := NewOpening(log, h.rdb, func(ctx context.Context) (*spool.Spool, error) {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return nil, err
		}
		return spool.Open(ctx, path, 64<<20)
	}, Config{URL: h.rc.URL, EdgeID: "jetson-1", Secret: []byte(testSecret), BackoffBase: 10 * time.Millisecond,
		BackoffMax: 50 * time.Millisecond, Poll: 10 * time.Millisecond, Heartbeat: 20 * time.Millisecond})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	for _, c := range sh.Collectors() {
		require.NoError(t, reg.Register(c))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sh.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	want := h.written(h.jobs(3, 1, `{}`))
	require.Eventually(t, func() bool { return len(h.rc.Statuses()) >= 3 }, 5*time.Second, 10*time.Millisecond, "heartbeats go on")
	assert.Zero(t, h.rc.Count())
	assert.Equal(t, int64(len(want)), h.rdb.XLen(ctx, jobs.CaptureStream).Val(), "the events wait in Redis")
	_, err = sh.MoveOnce(ctx)
	assert.ErrorIs(t, err, ErrNoSpool)
	assert.ErrorIs(t, sh.SendOnce(ctx).Err, ErrNoSpool)
	assert.Equal(t, 0.0, gauge(t, reg, "euterpe_sync_spool_open"))
	assert.Equal(t, 0.0, gauge(t, reg, "euterpe_sync_spool_events"))
	assert.Equal(t, 1, strings.Count(h.logs.String(), `level=ERROR msg="sync: cannot open the spool`), "logged once:\n%s", h.logs)

	require.NoError(t, os.Remove(blocker))
	require.Eventually(t, func() bool { return h.rc.Count() == len(want) }, 10*time.Second, 10*time.Millisecond, "%s", h.logs)
	assert.Equal(t, want, h.rc.Events())
	assert.Equal(t, 1.0, gauge(t, reg, "euterpe_sync_spool_open"))
	assert.Zero(t, h.rdb.XLen(ctx, jobs.CaptureStream).Val())

	cancel()
	require.NoError(t, <-done)
	done <- nil
	_, err = sh.Spool().Stats(context.Background())
	assert.Error(t, err, "Run closed the spool it opened")
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

// Shutdown while the spool is being opened ends Run at once and leaves no
// spool open: an opener waiting for its backoff is not called again (on
// its way out the edge would create directories or touch a card being
// unmounted), and a spool that opens only after shutdown began is closed
// without a move or a send.
func TestShutdownWhileOpeningTheSpool(t *testing.T) {
	for _, tc := range []struct {
		name  string
		calls int // opener calls in all
		open  func(ctx context.Context, path string, first chan<- struct{}) (*spool.Spool, error)
	}{
		{"waiting to retry", 1, func(ctx context.Context, path string, first chan<- struct{}) (*spool.Spool, error) {
			select {
			case first <- struct{}{}:
			default:
			}
			return nil, errors.New("read-only file system")
		}},
		{"opens after shutdown began", 1, func(ctx context.Context, path string, first chan<- struct{}) (*spool.Spool, error) {
			first <- struct{}{}
			<-ctx.Done()
			return spool.Open(context.Background(), path, 64<<20)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 64<<20, nil)
			path := filepath.Join(t.TempDir(), spool.File)
			var calls atomic.Int32
			var opened atomic.Pointer[spool.Spool]
			first := make(chan struct{}, 1)
			sh, err := NewOpening(slog.New(slog.NewTextHandler(h.logs, nil)), h.rdb, func(ctx context.Context) (*spool.Spool, error) {
				calls.Add(1)
				sp, err := tc.open(ctx, path, first)
				if sp != nil {
					opened.Store(sp)
				}
				return sp, err
			}, Config{URL: h.rc.URL, EdgeID: "jetson-1", Secret: []byte(testSecret), BackoffBase: time.Minute,
				BackoffMax: time.Minute, Poll: 10 * time.Millisecond, Rand: func() float64 { return 0.999 }})
			require.NoError(t, err)
			want := h.written(h.jobs(1, 1, `{}`))

			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- sh.Run(ctx) }()
			<-first
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return after shutdown")
			}
			assert.Equal(t, int32(tc.calls), calls.Load(), "opener calls")
			if sp := opened.Load(); sp != nil {
				_, err := sp.Stats(context.Background())
				assert.Error(t, err, "Run closed the spool it opened")
			}
			assert.Equal(t, int64(len(want)), h.rdb.XLen(context.Background(), jobs.CaptureStream).Val(), "nothing moved after shutdown")
			assert.Zero(t, h.rc.Count())
		})
	}
}
