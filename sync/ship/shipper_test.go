package ship

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/ship/shiptest"
	"github.com/vesta-cx/euterpe/sync/spool"
	"github.com/vesta-cx/euterpe/sync/wire"
)

const testSecret = "sync-secret-9f86d081884c7d659a2feaa0c55ad015"

type harness struct {
	t     *testing.T
	rdb   *redis.Client
	store *jobs.Store
	rc    *shiptest.Receiver
	logs  *testsvc.LogBuffer
	path  string
	sh    *Shipper
}

// newHarness is a capturing job store on a real Redis, a spool on a real
// SQLite file and a shipper pointed at a stand-in receiver. Whatever the
// test does, the secret must not appear in the shipper's log.
func newHarness(t *testing.T, budget int64, mut func(*Config)) *harness {
	t.Helper()
	rdb, _ := testsvc.Redis(t)
	st := jobs.NewStore(rdb)
	st.Capture = jobs.CaptureStream
	h := &harness{t: t, rdb: rdb, store: st, rc: shiptest.NewReceiver(t, []byte(testSecret)), logs: &testsvc.LogBuffer{},
		path: filepath.Join(t.TempDir(), spool.File)}
	h.sh = h.open(budget, mut)
	t.Cleanup(func() {
		assert.NotContains(t, h.logs.String(), testSecret, "the secret reached the log")
	})
	return h
}

func (h *harness) open(budget int64, mut func(*Config)) *Shipper {
	h.t.Helper()
	sp, err := spool.Open(context.Background(), h.path, budget)
	require.NoError(h.t, err)
	h.t.Cleanup(func() { _ = sp.Close() })
	cfg := Config{URL: h.rc.URL, EdgeID: "jetson-1", Secret: []byte(testSecret), BackoffBase: 10 * time.Millisecond,
		BackoffMax: 200 * time.Millisecond, Poll: 10 * time.Millisecond}
	if mut != nil {
		mut(&cfg)
	}
	log := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sh, err := New(log, h.rdb, sp, cfg)
	require.NoError(h.t, err)
	return sh
}

// jobs writes n jobs through the real scripts: queued, running, deltas
// deltas of data, done. It returns the job ids.
func (h *harness) jobs(n, deltas int, data string) []string {
	h.t.Helper()
	ctx := context.Background()
	ids := make([]string, n)
	for i := range ids {
		c, err := h.store.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 600})
		require.NoError(h.t, err)
		ids[i] = c.ID
		_, err = h.store.SetRunning(ctx, c.ID, "worker.start", nil)
		require.NoError(h.t, err)
		for d := 0; d < deltas; d++ {
			_, err = h.store.AppendEvent(ctx, c.ID, "delta", "worker.delta", json.RawMessage(data))
			require.NoError(h.t, err)
		}
		_, err = h.store.Finish(ctx, c.ID, jobs.Done, "worker.finish", json.RawMessage(`{"text":"ok"}`), nil, "")
		require.NoError(h.t, err)
	}
	return ids
}

// written is every event the scripts wrote for ids, as central should get it.
func (h *harness) written(ids []string) map[string]wire.Event {
	out := map[string]wire.Event{}
	for _, id := range ids {
		for _, m := range h.rdb.XRange(context.Background(), jobs.EventsKey(id), "-", "+").Val() {
			e := jobs.EventFromValues(m.ID, m.Values)
			w := wire.NewEvent("jetson-1", id, m.ID, e.Type, e.Step, e.TS, e.Data)
			w.Task = "chat"
			out[w.EventID] = w
		}
	}
	return out
}

// moveAll moves the whole capture stream into the spool.
func (h *harness) moveAll() {
	h.t.Helper()
	for {
		n, err := h.sh.MoveOnce(context.Background())
		require.NoError(h.t, err)
		if n == 0 {
			return
		}
	}
}

// drain moves everything and sends until the spool is idle, failing the
// test if an attempt is not accepted.
func (h *harness) drain() {
	h.t.Helper()
	ctx := context.Background()
	h.moveAll()
	for i := 0; ; i++ {
		r := h.sh.SendOnce(ctx)
		if r.Idle {
			return
		}
		if r.Action == actQuarantine && r.Status == 0 {
			continue // set aside by the edge itself; the test checks it
		}
		require.Equal(h.t, actAccepted, r.Action, "attempt %d: %+v", i, r)
	}
}

func TestShipsEveryEventOnceInCaptureOrder(t *testing.T) {
	h := newHarness(t, 64<<20, func(c *Config) { c.Heartbeat = 50 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- h.sh.Run(ctx) }()

	ids := h.jobs(60, 5, `{"text":"tok"}`)
	want := h.written(ids)
	require.Len(t, want, 60*8)
	require.Eventually(t, func() bool { return h.rc.Count() == len(want) }, 20*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return h.sh.Shipped() == int64(len(want)) }, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return len(h.rc.Statuses()) >= 2 }, 5*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)

	assert.Equal(t, want, h.rc.Events())
	// Per-job order: each job's events arrive in entry order.
	last := map[string]jobs.StreamID{}
	arrivals := h.rc.Arrivals()
	for _, e := range arrivals {
		id := jobs.MustStreamID(e.EntryID)
		if p, ok := last[e.JobID]; ok {
			assert.True(t, p.Less(id), "job %s: %s arrived after %s", e.JobID, e.EntryID, p)
		}
		last[e.JobID] = id
	}
	assert.Equal(t, len(want), len(arrivals), "nothing sent twice")
	assert.Equal(t, int64(len(want)), h.sh.Shipped())
	assert.Zero(t, h.rdb.XLen(context.Background(), jobs.CaptureStream).Val(), "moved entries leave Redis")
	st, err := h.sh.Spool().Stats(context.Background())
	require.NoError(t, err)
	assert.Zero(t, st.Events)
	sts := h.rc.Statuses()
	hb := sts[len(sts)-1]
	assert.Equal(t, "jetson-1", hb.EdgeID)
	assert.False(t, hb.StartedAt.IsZero())
}

// Once the spool transaction committed, the events are the spool's: a
// Redis flush and a restart of the shipper lose none of them.
func TestSpoolSurvivesRedisFlushAndRestart(t *testing.T) {
	h := newHarness(t, 64<<20, nil)
	ids := h.jobs(10, 3, `{"text":"x"}`)
	want := h.written(ids)
	n, err := h.sh.MoveOnce(context.Background())
	require.NoError(t, err)
	require.Equal(t, len(want), n)
	require.NoError(t, h.rdb.FlushDB(context.Background()).Err()) // the test's own logical database
	require.NoError(t, h.sh.Spool().Close())

	h.sh = h.open(64<<20, nil)
	h.drain()
	assert.Equal(t, want, h.rc.Events())
}

// A full spool drops only deltas, and central hears of each drop as a gap
// (in the next batch) that adds up to what was dropped.
func TestFullSpoolDropsDeltasAndShipsGaps(t *testing.T) {
	h := newHarness(t, 40_000, nil)
	data := `{"text":"` + strings.Repeat("y", 900) + `"}`
	ids := h.jobs(8, 10, data)
	want := h.written(ids)
	h.drain()

	dropped := h.sh.Spool().Dropped()
	require.Greater(t, dropped, int64(0))
	got := h.rc.Events()
	for id, e := range want {
		if e.Type != "delta" {
			assert.Contains(t, got, id, "a %s event was dropped", e.Type)
		}
	}
	var gapped int64
	for _, g := range h.rc.Gaps() {
		assert.Equal(t, "delta", g.Type)
		assert.Equal(t, wire.GapID("jetson-1", g.JobID, g.FirstEntryID), g.GapID)
		gapped += g.Count
	}
	assert.Equal(t, dropped, gapped)
	assert.Equal(t, int64(len(want))-dropped, int64(len(got)))
}

// 400 and 413 set the batch aside: kept in the spool's quarantine table,
// counted, logged once, never resent.
func TestRefusedBatchIsQuarantined(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
	}{{http.StatusBadRequest, wire.CodeInvalidBatch}, {http.StatusRequestEntityTooLarge, wire.CodeTooLarge}} {
		t.Run(tc.code, func(t *testing.T) {
			h := newHarness(t, 64<<20, nil)
			h.rc.SetHook(func(w http.ResponseWriter, r *http.Request, n int) bool {
				shiptest.Refuse(w, tc.status, tc.code)
				return true
			})
			h.jobs(3, 1, `{}`)
			_, err := h.sh.MoveOnce(context.Background())
			require.NoError(t, err)
			// A batch is refused whole: it is halved down to the item
			// refused, which alone is set aside (here every one is).
			r := h.sh.SendOnce(context.Background())
			assert.Equal(t, actSplit, r.Action)
			assert.Equal(t, 12, r.Events)
			for i := 0; ; i++ {
				require.Less(t, i, 100)
				if r = h.sh.SendOnce(context.Background()); r.Idle {
					break
				}
				assert.Contains(t, []action{actSplit, actQuarantine}, r.Action)
				assert.Equal(t, tc.code, r.Code)
			}
			assert.Equal(t, int64(12), h.sh.Quarantined())
			q, err := h.sh.Spool().QuarantineList(context.Background())
			require.NoError(t, err)
			require.Len(t, q, 12)
			for _, b := range q {
				assert.Equal(t, tc.status, b.Status)
				assert.Equal(t, 1, b.Events)
				d, err := wire.Decode([]byte(b.Body))
				require.NoError(t, err, "the quarantined body is the batch as sent")
				assert.Len(t, d.Events, 1)
			}
			assert.Equal(t, 1, strings.Count(h.logs.String(), "quarantined"), "logged once")
		})
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	future := time.Now().Add(42 * time.Second).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		name   string
		status int
		after  string
		min    time.Duration
		max    time.Duration
	}{
		{"429 seconds", http.StatusTooManyRequests, "7", 7 * time.Second, 7 * time.Second},
		{"503 date", http.StatusServiceUnavailable, future, 40 * time.Second, 43 * time.Second},
		{"503 absurd", http.StatusServiceUnavailable, "999999", time.Hour, time.Hour},
		{"429 without", http.StatusTooManyRequests, "", 0, 200 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 64<<20, nil)
			h.rc.SetHook(func(w http.ResponseWriter, r *http.Request, n int) bool {
				if n == 1 {
					if tc.after != "" {
						w.Header().Set("Retry-After", tc.after)
					}
					shiptest.Refuse(w, tc.status, wire.CodeRateLimited)
					return true
				}
				return false
			})
			h.jobs(1, 0, `{}`)
			_, err := h.sh.MoveOnce(context.Background())
			require.NoError(t, err)
			r := h.sh.SendOnce(context.Background())
			assert.Equal(t, actRetryAfter, r.Action)
			assert.GreaterOrEqual(t, r.Wait, tc.min)
			assert.LessOrEqual(t, r.Wait, tc.max)
			r = h.sh.SendOnce(context.Background())
			assert.Equal(t, actAccepted, r.Action, "the same batch goes through afterwards")
			assert.Equal(t, 3, h.rc.Count())
		})
	}
}

// Network errors back off exponentially with full jitter up to the cap.
func TestNetworkErrorsBackOffToTheCap(t *testing.T) {
	h := newHarness(t, 64<<20, func(c *Config) {
		c.BackoffBase, c.BackoffMax = 100*time.Millisecond, 800*time.Millisecond
		c.Rand = func() float64 { return 0.999 } // the top of each jitter range
	})
	// The dead port is taken after the harness's own servers listen: freed
	// before them, it could be handed to one of them.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	h.sh.cfg.URL = dead
	h.jobs(1, 0, `{}`)
	_, err = h.sh.MoveOnce(context.Background())
	require.NoError(t, err)
	var waits []time.Duration
	for i := 0; i < 6; i++ {
		r := h.sh.SendOnce(context.Background())
		require.Equal(t, actBackoff, r.Action)
		require.Error(t, r.Err)
		waits = append(waits, r.Wait.Round(10*time.Millisecond))
	}
	assert.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond,
		800 * time.Millisecond, 800 * time.Millisecond, 800 * time.Millisecond}, waits)
	h.sh.cfg.Rand = nil
	h.sh.backoff.Rand = func() float64 { return 0.25 }
	assert.Equal(t, 200*time.Millisecond, h.sh.SendOnce(context.Background()).Wait.Round(10*time.Millisecond), "jittered: a fraction of the ceiling")
	assert.Equal(t, 1, strings.Count(h.logs.String(), "cannot reach central"), "logged once")
	h.sh.cfg.URL = h.rc.URL
	assert.Equal(t, actAccepted, h.sh.SendOnce(context.Background()).Action)
}

// An edge whose clock is two hours ahead is refused for clock skew once,
// corrects its signing clock from central's Date header and goes on;
// heartbeats are signed with the corrected clock too.
func TestTwoHourClockOffsetCorrectedFromDate(t *testing.T) {
	for _, off := range []time.Duration{2 * time.Hour, -2 * time.Hour} {
		t.Run(off.String(), func(t *testing.T) {
			h := newHarness(t, 64<<20, func(c *Config) { c.Now = func() time.Time { return time.Now().Add(off) } })
			h.jobs(2, 1, `{}`)
			_, err := h.sh.MoveOnce(context.Background())
			require.NoError(t, err)
			r := h.sh.SendOnce(context.Background())
			require.Equal(t, actClockSkew, r.Action)
			assert.Zero(t, r.Wait, "retried at once")
			assert.InDelta(t, -off.Seconds(), time.Duration(h.sh.offset.Load()).Seconds(), 2)
			r = h.sh.SendOnce(context.Background())
			require.Equal(t, actAccepted, r.Action, "%+v", r)
			assert.Equal(t, 8, h.rc.Count())
			code, err := h.sh.SendHeartbeat(context.Background())
			require.NoError(t, err)
			assert.Equal(t, http.StatusNoContent, code)
			sent := h.rc.Statuses()[0].SentAt
			assert.WithinDuration(t, time.Now(), sent, 5*time.Second)
		})
	}
}

// Other 401/403 answers are an operator's problem: logged once with what
// to fix, events stay spooled, retried at the slow period.
func TestCredentialRefusalLoggedOnceAndRetriedSlowly(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
	}{{http.StatusUnauthorized, wire.CodeUnauthorized}, {http.StatusForbidden, wire.CodeEdgeDisabled}} {
		t.Run(tc.code, func(t *testing.T) {
			h := newHarness(t, 64<<20, nil)
			h.rc.SetHook(func(w http.ResponseWriter, r *http.Request, n int) bool {
				shiptest.Refuse(w, tc.status, tc.code)
				return true
			})
			h.jobs(1, 0, `{}`)
			_, err := h.sh.MoveOnce(context.Background())
			require.NoError(t, err)
			for i := 0; i < 3; i++ {
				r := h.sh.SendOnce(context.Background())
				assert.Equal(t, actAuth, r.Action)
				assert.Equal(t, 200*time.Millisecond, r.Wait)
			}
			assert.Equal(t, 1, strings.Count(h.logs.String(), "refuses this edge's credentials"))
			st, err := h.sh.Spool().Stats(context.Background())
			require.NoError(t, err)
			assert.Equal(t, int64(3), st.Events, "kept")
			// A wrong secret is the same refusal, from the real verifier.
			h.rc.SetHook(nil)
			h.sh.cfg.Secret = []byte("another-secret")
			assert.Equal(t, actAuth, h.sh.SendOnce(context.Background()).Action)
			h.sh.cfg.Secret = []byte(testSecret)
			assert.Equal(t, actAccepted, h.sh.SendOnce(context.Background()).Action)
		})
	}
}

// Batches hold at most 500 events and 1 MiB: larger spools are split,
// and an event central could never take is quarantined alone.
func TestBatchesSplitToFitAndUnsendableEventsHandled(t *testing.T) {
	h := newHarness(t, 256<<20, nil)
	big := `{"text":"` + strings.Repeat("z", 30_000) + `"}`
	ids := h.jobs(12, 50, big) // 624 events, ~18 MiB of text
	huge := `{"text":"` + strings.Repeat("h", wire.MaxDataBytes) + `"}`
	_, err := h.store.AppendEvent(context.Background(), h.jobs(1, 0, `{}`)[0], "delta", "x", json.RawMessage(huge))
	require.ErrorIs(t, err, jobs.ErrFinished) // finished jobs take no events; use a running one
	c, err := h.store.Create(context.Background(), jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 600})
	require.NoError(t, err)
	hugeEntry, err := h.store.AppendEvent(context.Background(), c.ID, "delta", "x", json.RawMessage(huge))
	require.NoError(t, err)
	latinEntry, err := h.store.AppendEvent(context.Background(), c.ID, "delta", "x", json.RawMessage("{\"text\":\"caf\xe9\"}"))
	require.NoError(t, err)
	// Central could never store a NUL in a step: that event alone is set aside.
	nulEntry, err := h.store.AppendEvent(context.Background(), c.ID, "delta", "x\x00y", json.RawMessage(`{"html":"<b>&</b>"}`))
	require.NoError(t, err)
	want := h.written(ids)
	h.drain()
	got := h.rc.Events()
	for id := range want {
		assert.Contains(t, got, id)
	}
	batches := h.rc.Batches()
	assert.Greater(t, len(batches), 17)
	for _, n := range batches {
		assert.LessOrEqual(t, n, wire.MaxCompressedBytes)
	}
	// Data over the limit travels as a note of its size, invalid UTF-8 as U+FFFD.
	require.Contains(t, got, wire.EventID("jetson-1", c.ID, hugeEntry))
	assert.JSONEq(t, `{"truncated":true,"bytes":65547}`, string(got[wire.EventID("jetson-1", c.ID, hugeEntry)].Data))
	require.Contains(t, got, wire.EventID("jetson-1", c.ID, latinEntry))
	assert.Equal(t, "{\"text\":\"caf\uFFFD\"}", string(got[wire.EventID("jetson-1", c.ID, latinEntry)].Data))
	assert.Equal(t, int64(1), h.sh.Quarantined())
	q, err := h.sh.Spool().QuarantineList(context.Background())
	require.NoError(t, err)
	require.Len(t, q, 1)
	assert.Equal(t, "invalid_event", q[0].Code)
	// Kept as it would be sent, not HTML-escaped: a resend gets it back at
	// its size.
	assert.Contains(t, q[0].Body, `"data":{"html":"<b>&</b>"}`)
	assert.NotContains(t, got, wire.EventID("jetson-1", c.ID, nulEntry))
}

// Only central's own answer to a batch deletes it: a 2xx from something
// else at the URL (a captive portal's login page, a proxy's fallback)
// would otherwise drop the batch from the
// spool although central never stored it. Such an answer backs off and
// the batch is sent again.
func TestOnlyCentralsBatchResultDeletesTheBatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve func(w http.ResponseWriter, r *http.Request)
	}{
		{"html page", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte("<html><body>Sign in to the network</body></html>"))
		}},
		{"empty 200", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }},
		{"204", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }},
		{"other JSON", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(`{"ok":true}`)) }},
		{"counts of another batch", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte(`{"accepted":1,"duplicates":0,"gaps":0}`))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 64<<20, nil)
			h.rc.SetHook(func(w http.ResponseWriter, r *http.Request, n int) bool {
				tc.serve(w, r)
				return true
			})
			ids := h.jobs(2, 1, `{}`)
			want := h.written(ids)
			_, err := h.sh.MoveOnce(context.Background())
			require.NoError(t, err)
			for i := 0; i < 2; i++ {
				r := h.sh.SendOnce(context.Background())
				assert.Equal(t, actBackoff, r.Action, "%+v", r)
				assert.Error(t, r.Err)
			}
			st, err := h.sh.Spool().Stats(context.Background())
			require.NoError(t, err)
			assert.Equal(t, int64(len(want)), st.Events, "still spooled")
			assert.Zero(t, h.sh.Shipped())
			assert.Equal(t, 1, strings.Count(h.logs.String(), "not central's answer"), "logged once")

			h.rc.SetHook(nil)
			require.Equal(t, actAccepted, h.sh.SendOnce(context.Background()).Action)
			assert.Equal(t, want, h.rc.Events())
			assert.Equal(t, int64(len(want)), h.sh.Shipped())
		})
	}
}

// A 400 or 413 sets a batch aside for good only when central says why
// (invalid_batch, too_large). The same status from something in front of
// it — a proxy's body limit, "plain HTTP sent to the HTTPS port" — says
// nothing about the batch: quarantining would set aside every batch the
// edge has, so it keeps them: a proxy's 413 splits the batch (smaller
// bodies pass its limit, TestProxyBodyLimitSplitsBatches), a 400 backs off.
func TestRefusalNotFromCentralIsNotQuarantined(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		act    action
	}{
		{"nginx 413", http.StatusRequestEntityTooLarge, "<html><head><title>413 Request Entity Too Large</title></head></html>", actSplit},
		{"plain HTTP to HTTPS port", http.StatusBadRequest, "<html><head><title>400 The plain HTTP request was sent to HTTPS port</title></head></html>", actBackoff},
		{"another error code", http.StatusBadRequest, `{"error":{"code":"bad_request"}}`, actBackoff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 64<<20, nil)
			h.rc.SetHook(func(w http.ResponseWriter, r *http.Request, n int) bool {
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
				return true
			})
			ids := h.jobs(2, 1, `{}`)
			want := h.written(ids)
			_, err := h.sh.MoveOnce(context.Background())
			require.NoError(t, err)
			r := h.sh.SendOnce(context.Background())
			assert.Equal(t, tc.act, r.Action, "%+v", r)
			assert.Zero(t, h.sh.Quarantined())
			q, err := h.sh.Spool().QuarantineList(context.Background())
			require.NoError(t, err)
			assert.Empty(t, q)

			h.rc.SetHook(nil)
			h.drain()
			assert.Equal(t, want, h.rc.Events())
		})
	}
}

// A Retry-After of zero (or a date already past) is no wait at all: taken
// as given, a proxy answering 503 with it would have the sender resend
// the batch in a tight loop. It backs off instead, jittered and capped.
func TestZeroRetryAfterBacksOff(t *testing.T) {
	past := time.Now().Add(-time.Minute).UTC().Format(http.TimeFormat)
	for _, after := range []string{"0", past} {
		t.Run(after, func(t *testing.T) {
			h := newHarness(t, 64<<20, func(c *Config) {
				c.BackoffBase, c.BackoffMax = 100*time.Millisecond, 800*time.Millisecond
				c.Rand = func() float64 { return 0.999 }
			})
			h.rc.SetHook(func(w http.ResponseWriter, r *http.Request, n int) bool {
				w.Header().Set("Retry-After", after)
				shiptest.Refuse(w, http.StatusServiceUnavailable, "unavailable")
				return true
			})
			h.jobs(1, 0, `{}`)
			_, err := h.sh.MoveOnce(context.Background())
			require.NoError(t, err)
			var waits []time.Duration
			for i := 0; i < 3; i++ {
				r := h.sh.SendOnce(context.Background())
				require.Equal(t, actRetryAfter, r.Action)
				waits = append(waits, r.Wait.Round(10*time.Millisecond))
			}
			assert.Equal(t, []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}, waits)
		})
	}
}

// A redirect from the sync URL is not followed: the signed request and its
// x-euterpe-* headers would reach another host, which could replay them to
// central within the signature's skew window. It is an answer like any
// other non-2xx: the batch stays spooled and is sent again after a backoff.
func TestRedirectIsNotFollowed(t *testing.T) {
	for _, status := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusFound} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			var elsewhere atomic.Int32
			other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				elsewhere.Add(1)
				w.WriteHeader(http.StatusNoContent)
			}))
			defer other.Close()
			h := newHarness(t, 64<<20, nil)
			h.rc.SetHook(func(w http.ResponseWriter, r *http.Request, n int) bool {
				http.Redirect(w, r, other.URL+r.URL.Path, status)
				return true
			})
			ids := h.jobs(1, 0, `{}`)
			want := h.written(ids)
			_, err := h.sh.MoveOnce(context.Background())
			require.NoError(t, err)
			r := h.sh.SendOnce(context.Background())
			assert.Equal(t, actBackoff, r.Action, "%+v", r)
			assert.Zero(t, elsewhere.Load(), "the signed request followed the redirect")
			assert.Zero(t, h.sh.Quarantined())
			assert.Contains(t, h.logs.String(), "a redirect to", "the log says why")

			h.rc.SetHook(nil)
			require.Equal(t, actAccepted, h.sh.SendOnce(context.Background()).Action)
			assert.Equal(t, want, h.rc.Events())
		})
	}
}
