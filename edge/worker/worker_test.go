package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

func TestJobOutcomes(t *testing.T) { testsvc.EachRedis(t, testJobOutcomes) }

func testJobOutcomes(t *testing.T) {
	long := strings.Repeat("é", 2000)
	be := backend.NewRegistry(map[string]backend.Backend{
		"chat": backend.Func(func(ctx context.Context, r backend.Request, _ backend.Delta) (json.RawMessage, error) {
			return json.Marshal(map[string]any{"echo": json.RawMessage(r.Payload), "task": r.Task})
		}),
		"tool": backend.Func(func(ctx context.Context, r backend.Request, _ backend.Delta) (json.RawMessage, error) {
			return nil, backend.Errorf(backend.CodeBackendError, 502, "upstream said: %s", long)
		}),
	})
	tests := []struct {
		name       string
		task       string
		payload    string
		wantStatus string
		wantResult string
		wantCode   string
		wantHTTP   int
	}{
		{"done with result", "chat", `{"prompt":"hi"}`, jobs.Done, `{"echo":{"prompt":"hi"},"task":"chat"}`, "", 0},
		{"unparseable payload as _raw", "chat", `not json {`, jobs.Done, `{"echo":{"_raw":"not json {"},"task":"chat"}`, "", 0},
		{"array payload as _raw", "chat", `[1,2]`, jobs.Done, `{"echo":{"_raw":"[1,2]"},"task":"chat"}`, "", 0},
		{"task not configured", "rag", `{}`, jobs.Error, "", backend.CodeTaskNotConfigured, 0},
		{"backend error keeps status, caps message", "tool", `{}`, jobs.Error, "", backend.CodeBackendError, 502},
	}
	rdb, st, _ := newRedis(t)
	startPool(t, rdb, st, "w1", testSettings(), be)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := create(t, st, tc.task, tc.payload)
			j := waitTerminal(t, st, id, 5*time.Second)
			if j.Status != tc.wantStatus {
				t.Fatalf("status = %s (error %s)", j.Status, j.Error)
			}
			if tc.wantResult != "" && string(j.Result) != tc.wantResult {
				t.Fatalf("result = %s, want %s", j.Result, tc.wantResult)
			}
			if tc.wantCode != "" {
				e := errorCode(t, j)
				if e.Code != tc.wantCode || e.Status != tc.wantHTTP || len(e.Message) > 512 {
					t.Fatalf("error = %+v (len %d)", e, len(e.Message))
				}
			}
			types := eventTypes(t, st, id)
			want := []string{"queued", "running", tc.wantStatus}
			if strings.Join(types, ",") != strings.Join(want, ",") {
				t.Fatalf("events = %v, want %v", types, want)
			}
			ttl := rdb.TTL(context.Background(), jobs.EventsKey(id)).Val()
			if ttl <= 0 || ttl > 600*time.Second {
				t.Fatalf("events TTL = %v", ttl)
			}
		})
	}
	waitNoPending(t, rdb, 2*time.Second)
}

func TestStreamingDeltasCoalesced(t *testing.T) { testsvc.EachRedis(t, testStreamingDeltasCoalesced) }

func testStreamingDeltasCoalesced(t *testing.T) {
	const tokens = 300
	be := backend.NewRegistry(map[string]backend.Backend{
		"chat": backend.Func(func(ctx context.Context, r backend.Request, delta backend.Delta) (json.RawMessage, error) {
			var sb strings.Builder
			for i := range tokens {
				s := fmt.Sprintf("t%d ", i)
				sb.WriteString(s)
				delta(s)
				if i%10 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
			return json.Marshal(map[string]string{"text": sb.String()})
		}),
	})
	rdb, st, _ := newRedis(t)
	s := testSettings()
	s.DeltaInterval = 20 * time.Millisecond
	s.DeltaBytes = 512
	startPool(t, rdb, st, "w1", s, be)
	id := create(t, st, "chat", `{"prompt":"x"}`)
	j := waitTerminal(t, st, id, 5*time.Second)
	evs, err := st.Events(context.Background(), id, "", 10000)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	deltas := 0
	for i, e := range evs {
		if e.Type == "delta" {
			deltas++
			var d struct{ Text string }
			_ = json.Unmarshal(e.Data, &d)
			text.WriteString(d.Text)
			if i == len(evs)-1 {
				t.Fatal("delta after the terminal event")
			}
		}
	}
	var res struct{ Text string }
	_ = json.Unmarshal(j.Result, &res)
	if text.String() != res.Text {
		t.Fatalf("deltas concatenate to %q, result text %q", text.String(), res.Text)
	}
	if deltas == 0 || deltas > tokens/10 {
		t.Fatalf("%d delta events for %d tokens: not coalesced", deltas, tokens)
	}
	if evs[len(evs)-1].Type != "done" {
		t.Fatalf("last event %s", evs[len(evs)-1].Type)
	}
}

// blocking is a backend that runs until its context ends and reports when
// it started and how long cancellation took to reach it.
type blocking struct {
	started chan string
	stopped chan time.Time
}

func newBlocking() *blocking {
	return &blocking{started: make(chan string, 16), stopped: make(chan time.Time, 16)}
}

func (b *blocking) Run(ctx context.Context, r backend.Request, _ backend.Delta) (json.RawMessage, error) {
	b.started <- r.JobID
	<-ctx.Done()
	b.stopped <- time.Now()
	return nil, ctx.Err()
}

func TestCancelRunningJob(t *testing.T) { testsvc.EachRedis(t, testCancelRunningJob) }

func testCancelRunningJob(t *testing.T) {
	for _, viaPoll := range []bool{false, true} {
		t.Run(fmt.Sprintf("poll_only=%v", viaPoll), func(t *testing.T) {
			rdb, st, _ := newRedis(t)
			b := newBlocking()
			p := startPool(t, rdb, st, "w1", testSettings(), backend.NewRegistry(map[string]backend.Backend{"code": b}))
			id := create(t, st, "code", `{"prompt":"x"}`)
			<-b.started
			if viaPoll {
				// Write the cancel without its pub/sub message: the status
				// poll alone must notice it.
				p.mu.Lock()
				j := p.byJob[id]
				p.mu.Unlock()
				if j == nil {
					t.Fatal("job not tracked")
				}
				if err := rdb.HSet(context.Background(), jobs.JobKey(id), "status", jobs.Canceled).Err(); err != nil {
					t.Fatal(err)
				}
			} else if _, err := st.Cancel(context.Background(), id, "test", "user asked"); err != nil {
				t.Fatal(err)
			}
			at := time.Now()
			select {
			case stopped := <-b.stopped:
				// The cancel poll is 200 ms; the rest is room for a busy
				// machine.
				if d := stopped.Sub(at); d > 5*time.Second {
					t.Fatalf("backend abandoned after %v", d)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("backend call not abandoned")
			}
			waitNoPending(t, rdb, 2*time.Second)
			types := eventTypes(t, st, id)
			if !viaPoll && (terminalCount(types) != 1 || types[len(types)-1] != "canceled") {
				t.Fatalf("events = %v, want exactly one terminal event, canceled", types)
			}
			if viaPoll && terminalCount(types) != 0 {
				t.Fatalf("worker wrote a terminal event for a cancelled job: %v", types)
			}
		})
	}
}

func TestCancelledBeforeRunning(t *testing.T) { testsvc.EachRedis(t, testCancelledBeforeRunning) }

func testCancelledBeforeRunning(t *testing.T) {
	rdb, st, _ := newRedis(t)
	id := create(t, st, "chat", `{}`)
	if _, err := st.Cancel(context.Background(), id, "test", "changed my mind"); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	startPool(t, rdb, st, "w1", testSettings(), backend.NewRegistry(map[string]backend.Backend{
		"chat": backend.Func(func(context.Context, backend.Request, backend.Delta) (json.RawMessage, error) {
			calls.Add(1)
			return json.RawMessage(`{}`), nil
		}),
	}))
	waitDelivered(t, rdb, 3*time.Second)
	waitNoPending(t, rdb, 3*time.Second)
	if n := rdb.XLen(context.Background(), jobs.QueueStream).Val(); n != 0 {
		t.Fatalf("queue length %d, want the acknowledged entry deleted", n)
	}
	if calls.Load() != 0 {
		t.Fatal("backend ran a cancelled job")
	}
	if types := eventTypes(t, st, id); strings.Join(types, ",") != "queued,canceled" {
		t.Fatalf("events = %v", types)
	}
}

// orphan reads the job's message as a consumer that then "dies", after
// (optionally) marking the job running, and re-delivers it extra times.
func orphan(t *testing.T, rdb *redis.Client, st *jobs.Store, id string, extraDeliveries int) string {
	t.Helper()
	ctx := context.Background()
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: jobs.Group, Consumer: "dead", Streams: []string{jobs.QueueStream, ">"}, Count: 1}).Result()
	if err != nil || len(res[0].Messages) != 1 {
		t.Fatalf("orphan read: %v %v", res, err)
	}
	msgID := res[0].Messages[0].ID
	if _, err := st.SetRunning(ctx, id, "dead.start", nil); err != nil {
		t.Fatal(err)
	}
	for range extraDeliveries {
		if err := rdb.XClaim(ctx, &redis.XClaimArgs{Stream: jobs.QueueStream, Group: jobs.Group, Consumer: "dead", MinIdle: 0, Messages: []string{msgID}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return msgID
}

func TestRecoveryBothPaths(t *testing.T) { testsvc.EachRedis(t, testRecoveryBothPaths) }

func testRecoveryBothPaths(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		want := "XAUTOCLAIM"
		if fallback {
			want = "XPENDING+XCLAIM"
		}
		t.Run(want, func(t *testing.T) {
			rdb, st, _ := newRedis(t)
			if !fallback && !SupportsAutoClaim(rdb.Info(context.Background(), "server").Val()) {
				t.Skip("server has no XAUTOCLAIM")
			}
			id := create(t, st, "chat", `{"n":1}`)
			orphan(t, rdb, st, id, 0)
			s := testSettings()
			s.ClaimFallback = fallback
			var ran atomic.Int32
			p := startPool(t, rdb, st, "survivor", s, backend.NewRegistry(map[string]backend.Backend{
				"chat": backend.Func(func(context.Context, backend.Request, backend.Delta) (json.RawMessage, error) {
					ran.Add(1)
					return json.RawMessage(`{"ok":true}`), nil
				}),
			}))
			j := waitTerminal(t, st, id, 5*time.Second)
			if j.Status != jobs.Done || ran.Load() != 1 {
				t.Fatalf("status %s, ran %d times", j.Status, ran.Load())
			}
			waitNoPending(t, rdb, 2*time.Second)
			if got := p.claimer.name(); got != want {
				t.Fatalf("recovered via %s, want %s", got, want)
			}
			if types := eventTypes(t, st, id); terminalCount(types) != 1 {
				t.Fatalf("events = %v", types)
			}
		})
	}
}

func TestDeadLetterAfterMaxDeliveries(t *testing.T) {
	testsvc.EachRedis(t, testDeadLetterAfterMaxDeliveries)
}

func testDeadLetterAfterMaxDeliveries(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		t.Run(fmt.Sprintf("fallback=%v", fallback), func(t *testing.T) {
			rdb, st, _ := newRedis(t)
			id := create(t, st, "chat", `{"poison":true}`)
			s := testSettings()
			s.MaxDeliveries = 3
			s.ClaimFallback = fallback
			msgID := orphan(t, rdb, st, id, 2) // delivered 3 times; the next claim is the 4th
			var ran atomic.Int32
			startPool(t, rdb, st, "survivor", s, backend.NewRegistry(map[string]backend.Backend{
				"chat": backend.Func(func(context.Context, backend.Request, backend.Delta) (json.RawMessage, error) {
					ran.Add(1)
					return json.RawMessage(`{}`), nil
				}),
			}))
			j := waitTerminal(t, st, id, 5*time.Second)
			if j.Status != jobs.Error || errorCode(t, j).Code != CodeMaxDeliveries || ran.Load() != 0 {
				t.Fatalf("job %s error %s, ran %d", j.Status, j.Error, ran.Load())
			}
			waitNoPending(t, rdb, 2*time.Second)
			dead := rdb.XRange(context.Background(), jobs.DeadStream, "-", "+").Val()
			if len(dead) != 1 || dead[0].Values["job_id"] != id || dead[0].Values["msg_id"] != msgID ||
				dead[0].Values["deliveries"] != "4" || dead[0].Values["payload"] != `{"poison":true}` || dead[0].Values["reason"] != CodeMaxDeliveries {
				t.Fatalf("jobs:dead = %v", dead)
			}
			if types := eventTypes(t, st, id); terminalCount(types) != 1 || types[len(types)-1] != "error" {
				t.Fatalf("events = %v", types)
			}
			if n := rdb.XLen(context.Background(), jobs.QueueStream).Val(); n != 0 {
				t.Fatalf("dead-lettered entry left in %s (%d entries)", jobs.QueueStream, n)
			}
		})
	}
}

func TestMalformedMessageDeadLettered(t *testing.T) {
	testsvc.EachRedis(t, testMalformedMessageDeadLettered)
}

func testMalformedMessageDeadLettered(t *testing.T) {
	rdb, st, _ := newRedis(t)
	ctx := context.Background()
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: jobs.QueueStream, Values: []any{"task", "chat", "payload", "{}"}}).Err(); err != nil {
		t.Fatal(err)
	}
	startPool(t, rdb, st, "w1", testSettings(), backend.NewRegistry(nil))
	waitDelivered(t, rdb, 3*time.Second)
	waitNoPending(t, rdb, 3*time.Second)
	if dead := rdb.XRange(ctx, jobs.DeadStream, "-", "+").Val(); len(dead) != 1 || dead[0].Values["reason"] != "malformed_message" {
		t.Fatalf("jobs:dead = %v", dead)
	}
}

func TestSupportsAutoClaim(t *testing.T) {
	tests := []struct {
		info string
		want bool
	}{
		{"# Server\r\nredis_version:6.0.16\r\nredis_mode:standalone\r\n", false},
		{"redis_version:6.2.0\r\n", true},
		{"redis_version:7.0.15\r\n", true},
		{"redis_version:5.0.7\r\n", false},
		{"redis_mode:standalone\r\n", false},
		{"redis_version:garbage\r\n", false},
	}
	for _, tc := range tests {
		if got := SupportsAutoClaim(tc.info); got != tc.want {
			t.Errorf("SupportsAutoClaim(%q) = %v", tc.info, got)
		}
	}
}

func TestCoalescer(t *testing.T) {
	var got []string
	c := newCoalescer(time.Hour, 10, func(s string) { got = append(got, s) })
	for _, s := range []string{"abc", "def", "ghij", "kl", "m"} {
		c.Add(s)
	}
	c.Close(true)
	if strings.Join(got, "|") != "abcdefghij|klm" {
		t.Fatalf("flushes = %q", got)
	}
}
