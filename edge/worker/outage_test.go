package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// outageRig is a pool whose Redis client goes through a testsvc.CutProxy, running
// one backend that blocks until released and counts its runs.
type outageRig struct {
	rdb     *redis.Client // direct, for the test's own reads
	st      *jobs.Store
	proxy   *testsvc.CutProxy
	logs    *testsvc.LogBuffer
	runs    atomic.Int32
	started chan string
	release chan struct{}
	stop    context.CancelFunc
	done    chan error
}

// newOutageRig starts the pool. Its client does not retry commands itself,
// so that a write given up after a bounded number of attempts would be
// given up well within the outages the tests make.
func newOutageRig(t *testing.T, s Settings) *outageRig {
	t.Helper()
	rdb, st, opts := newRedis(t)
	r := &outageRig{rdb: rdb, st: st, logs: &testsvc.LogBuffer{}, started: make(chan string, 4), release: make(chan struct{})}
	r.proxy = testsvc.NewCutProxy(t, opts.Addr)
	po := *opts
	po.Addr = r.proxy.Addr()
	po.MaxRetries = -1
	po.DialTimeout = time.Second
	via := redis.NewClient(&po)
	t.Cleanup(func() { _ = via.Close() })
	be := backend.NewRegistry(map[string]backend.Backend{"chat": backend.Func(func(ctx context.Context, req backend.Request, _ backend.Delta) (json.RawMessage, error) {
		n := r.runs.Add(1)
		r.started <- req.JobID
		select {
		case <-r.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return json.RawMessage(fmt.Sprintf(`{"run":%d}`, n)), nil
	})})
	p, err := New(slog.New(slog.NewJSONHandler(r.logs, nil)), via, jobs.NewStore(via), "w-outage", s, be)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r.stop, r.done = cancel, make(chan error, 1)
	go func() { r.done <- p.Run(ctx) }()
	t.Cleanup(func() {
		r.proxy.SetCut(false)
		cancel()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Error("pool did not stop")
		}
	})
	return r
}

// waitLog waits until the log holds substr.
func (r *outageRig) waitLog(t *testing.T, substr string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(r.logs.String(), substr) {
		require.True(t, time.Now().Before(deadline), "no %q in the log after %v:\n%s", substr, within, r.logs.String())
		time.Sleep(10 * time.Millisecond)
	}
}

// finishDuringOutage starts a job, cuts Redis off while it runs, lets the
// backend return, and waits for the first failed write of its outcome.
func (r *outageRig) finishDuringOutage(t *testing.T) string {
	t.Helper()
	id := create(t, r.st, "chat", `{}`)
	select {
	case <-r.started:
	case <-time.After(10 * time.Second):
		t.Fatal("job never started")
	}
	waitStatus(t, r.st, id, jobs.Running, 5*time.Second)
	r.proxy.SetCut(true)
	close(r.release)
	r.waitLog(t, "finish job; retrying", 10*time.Second)
	return id
}

// A job that finishes while Redis is unreachable for far longer than a
// few quick retries keeps its outcome, its slot and its heartbeat until
// Redis is back, then is written: the backend ran once, with one running
// event and one terminal event, and the entry is not recovered and re-run.
func TestOutcomeWaitsOutRedisOutage(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		ctx := context.Background()
		r := newOutageRig(t, testSettings())
		id := r.finishDuringOutage(t)

		// Several claim-idle periods, and many times what five quick
		// attempts take.
		time.Sleep(3 * time.Second)
		j, err := r.st.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, jobs.Running, j.Status)
		assert.NotContains(t, r.logs.String(), "job outcome not written")

		r.proxy.SetCut(false)
		j = waitTerminal(t, r.st, id, 15*time.Second)
		assert.Equal(t, jobs.Done, j.Status)
		assert.JSONEq(t, `{"run":1}`, string(j.Result))
		waitNoPending(t, r.rdb, 5*time.Second)
		// Give recovery a few passes to run the job again, had it been let go.
		time.Sleep(time.Second)
		assert.EqualValues(t, 1, r.runs.Load(), "backend runs")
		assert.Equal(t, []string{"queued", "running", "done"}, eventTypes(t, r.st, id))
		assert.NotContains(t, r.logs.String(), "job outcome not written")
	})
}

// Shutdown during an outage ends the retries of an unwritten outcome at
// once, saying why: the pool stops within its drain, and the entry stays
// pending under this consumer for recovery after the restart.
func TestShutdownEndsOutcomeRetries(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		ctx := context.Background()
		s := testSettings()
		r := newOutageRig(t, s)
		id := r.finishDuringOutage(t)
		time.Sleep(500 * time.Millisecond)

		began := time.Now()
		r.stop()
		select {
		case err := <-r.done:
			require.NoError(t, err)
			r.done <- nil // for the rig's cleanup
		case <-time.After(5 * time.Second):
			t.Fatalf("pool still running 5s after shutdown:\n%s", r.logs.String())
		}
		assert.Less(t, time.Since(began), s.Drain+2*time.Second, "shutdown took too long")
		assert.True(t, logLine(r.logs.String(), `"msg":"job outcome not written; left pending for recovery"`, `"job_id":"`+id+`","reason":"shutting down"`),
			"no give-up line:\n%s", r.logs.String())

		j, err := r.st.Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, jobs.Running, j.Status)
		pend := r.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: jobs.QueueStream, Group: jobs.Group, Start: "-", End: "+", Count: 10}).Val()
		require.Len(t, pend, 1)
		assert.Equal(t, "w-outage", pend[0].Consumer)
	})
}

// failPipelines makes every pipeline of a client fail as a dropped
// connection would while on is set; single commands (the heartbeat's
// script) still go through, and so does the pipeline that sets up a new
// connection (HELLO, CLIENT SETINFO…): go-redis drops the connection a
// failed pipeline used, and failing its replacement's set-up would fail
// every command.
type failPipelines struct{ on atomic.Bool }

// connSetup reports whether cmds set up a connection.
func connSetup(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		switch strings.ToLower(c.Name()) {
		case "hello", "auth", "select", "client", "readonly":
			return true
		}
	}
	return false
}

func (*failPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*failPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *failPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !h.on.Load() || connSetup(cmds) {
			return next(ctx, cmds)
		}
		err := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
		for _, c := range cmds {
			c.SetErr(err)
		}
		return err
	}
}

// An outcome waiting for Redis is given up, saying why, once a heartbeat
// finds its queue entry pending under another consumer: that consumer has
// the job now. The job is then run again and finished once.
func TestOutcomeGivenUpWhenEntryClaimed(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		ctx := context.Background()
		rdb, st, opts := newRedis(t)
		var hook failPipelines
		po := *opts
		via := redis.NewClient(&po)
		via.AddHook(&hook)
		t.Cleanup(func() { _ = via.Close() })
		var runs atomic.Int32
		started := make(chan struct{}, 4)
		release := make(chan struct{})
		be := backend.NewRegistry(map[string]backend.Backend{"chat": backend.Func(func(ctx context.Context, _ backend.Request, _ backend.Delta) (json.RawMessage, error) {
			n := runs.Add(1)
			started <- struct{}{}
			if n == 1 {
				<-release
			}
			return json.RawMessage(fmt.Sprintf(`{"run":%d}`, n)), nil
		})})
		var logs testsvc.LogBuffer
		p, err := New(slog.New(slog.NewJSONHandler(&logs, nil)), via, jobs.NewStore(via), "w-slow", testSettings(), be)
		require.NoError(t, err)
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- p.Run(runCtx) }()
		defer func() { cancel(); <-done }()

		id := create(t, st, "chat", `{}`)
		<-started
		waitStatus(t, st, id, jobs.Running, 5*time.Second)
		hook.on.Store(true)
		close(release)
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(logs.String(), "finish job; retrying") {
			require.True(t, time.Now().Before(deadline), "no failed finish:\n%s", logs.String())
			time.Sleep(10 * time.Millisecond)
		}
		msgs := rdb.XRange(ctx, jobs.QueueStream, "-", "+").Val()
		require.Len(t, msgs, 1)
		require.NoError(t, rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: jobs.QueueStream, Group: jobs.Group,
			Consumer: "w-other", Messages: []string{msgs[0].ID}}).Err())

		for !logLine(logs.String(), `"msg":"job outcome not written; left pending for recovery"`, `"job_id":"`+id+`","reason":"queue message claimed by another consumer"`) {
			require.True(t, time.Now().Before(deadline), "outcome not given up:\n%s", logs.String())
			time.Sleep(10 * time.Millisecond)
		}
		j, err := st.Get(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, jobs.Running, j.Status)
		assert.EqualValues(t, 1, runs.Load())

		hook.on.Store(false)
		j = waitTerminal(t, st, id, 15*time.Second)
		assert.Equal(t, jobs.Done, j.Status)
		assert.JSONEq(t, `{"run":2}`, string(j.Result))
		types := eventTypes(t, st, id)
		assert.Equal(t, 1, terminalCount(types), "events %v", types)
	})
}

// logLine reports whether one line of logs holds every part.
func logLine(logs string, parts ...string) bool {
	for _, l := range strings.Split(logs, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			return true
		}
	}
	return false
}
