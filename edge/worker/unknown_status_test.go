package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// A job whose status is outside the state machine can never be started,
// failed or finished. Its queue message is dead-lettered once (reason
// unknown_status) and acknowledged, instead of being reclaimed for ever,
// and the job's hash and events are left exactly as they were: a newer
// version that wrote the status may still know what to do with the job.
func TestUnknownStatusDeadLetteredOnce(t *testing.T) {
	testsvc.EachRedis(t, testUnknownStatusDeadLetteredOnce)
}

func testUnknownStatusDeadLetteredOnce(t *testing.T) {
	tests := []struct {
		name        string
		orphaned    bool // first delivered to a consumer that died, so recovery meets it
		fallback    bool
		redelivered int // deliveries beyond the first, before recovery
		wantReason  string
	}{
		{"delivered", false, false, 0, CodeUnknownStatus},
		{"recovered by XAUTOCLAIM", true, false, 0, CodeUnknownStatus},
		{"recovered by XPENDING+XCLAIM", true, true, 0, CodeUnknownStatus},
		// Over-delivered: the job cannot be failed, the message still ends.
		{"over-delivered, XAUTOCLAIM", true, false, 5, CodeMaxDeliveries},
		{"over-delivered, XPENDING+XCLAIM", true, true, 5, CodeMaxDeliveries},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rdb, st, _ := newRedis(t)
			ctx := context.Background()
			if tc.orphaned && !tc.fallback && !SupportsAutoClaim(rdb.Info(ctx, "server").Val()) {
				t.Skip("server has no XAUTOCLAIM")
			}
			id := create(t, st, "chat", `{"n":1}`)
			msgID := ""
			if tc.orphaned {
				msgID = orphan(t, rdb, st, id, tc.redelivered)
			}
			if err := rdb.HSet(ctx, jobs.JobKey(id), "status", "paused", "result", `{"partial":true}`).Err(); err != nil {
				t.Fatal(err)
			}
			before := rdb.HGetAll(ctx, jobs.JobKey(id)).Val()
			events := eventTypes(t, st, id)
			s := testSettings()
			s.ClaimFallback = tc.fallback
			s.MaxDeliveries = 3
			s.ClaimIdle = 200 * time.Millisecond
			s.ClaimInterval = 50 * time.Millisecond
			var ran atomic.Int32
			rounds := recoveryRounds(rdb)
			startPool(t, rdb, st, "w1", s, backend.NewRegistry(map[string]backend.Backend{
				"chat": backend.Func(func(context.Context, backend.Request, backend.Delta) (json.RawMessage, error) {
					ran.Add(1)
					return json.RawMessage(`{}`), nil
				}),
			}))
			waitDelivered(t, rdb, 10*time.Second)
			waitNoPending(t, rdb, 10*time.Second)
			// Several recovery rounds more: nothing comes back.
			waitRounds(t, rounds, 6)
			dead := rdb.XRange(ctx, jobs.DeadStream, "-", "+").Val()
			if len(dead) != 1 || dead[0].Values["job_id"] != id || dead[0].Values["reason"] != tc.wantReason ||
				(msgID != "" && dead[0].Values["msg_id"] != msgID) {
				t.Fatalf("jobs:dead = %v", dead)
			}
			if n := rdb.XLen(ctx, jobs.QueueStream).Val(); n != 0 {
				t.Fatalf("%d entries left in %s", n, jobs.QueueStream)
			}
			if after := rdb.HGetAll(ctx, jobs.JobKey(id)).Val(); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("job hash changed:\n%v\nwas\n%v", after, before)
			}
			if got := eventTypes(t, st, id); fmt.Sprint(got) != fmt.Sprint(events) {
				t.Fatalf("events %v, were %v", got, events)
			}
			if ran.Load() != 0 {
				t.Fatalf("backend ran %d times", ran.Load())
			}
		})
	}
}

// A status outside the state machine written while the job runs stops the
// backend call (the status poll hears it) and dead-letters the message
// once, writing nothing to the job: it is not a cancel, whose message is
// acknowledged without a trace.
func TestUnknownStatusWhileRunning(t *testing.T) { testsvc.EachRedis(t, testUnknownStatusWhileRunning) }

func testUnknownStatusWhileRunning(t *testing.T) {
	rdb, st, _ := newRedis(t)
	ctx := context.Background()
	b := newBlocking()
	startPool(t, rdb, st, "w1", testSettings(), backend.NewRegistry(map[string]backend.Backend{"code": b}))
	id := create(t, st, "code", `{}`)
	<-b.started
	if err := rdb.HSet(ctx, jobs.JobKey(id), "status", "migrating").Err(); err != nil {
		t.Fatal(err)
	}
	before := rdb.HGetAll(ctx, jobs.JobKey(id)).Val()
	events := eventTypes(t, st, id)
	select {
	case <-b.stopped:
	case <-time.After(3 * time.Second):
		t.Fatal("backend call not abandoned")
	}
	waitNoPending(t, rdb, 3*time.Second)
	dead := rdb.XRange(ctx, jobs.DeadStream, "-", "+").Val()
	if len(dead) != 1 || dead[0].Values["job_id"] != id || dead[0].Values["reason"] != CodeUnknownStatus ||
		dead[0].Values["payload"] != `{}` {
		t.Fatalf("jobs:dead = %v", dead)
	}
	if after := rdb.HGetAll(ctx, jobs.JobKey(id)).Val(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("job hash changed:\n%v\nwas\n%v", after, before)
	}
	if got := eventTypes(t, st, id); fmt.Sprint(got) != fmt.Sprint(events) {
		t.Fatalf("events %v, were %v", got, events)
	}
}

// A job key that holds no hash (someone SET it) is no job any version can
// run: its message is dead-lettered once and the key left as it is.
func TestJobKeyNotAHashDeadLetteredOnce(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		rdb, st, _ := newRedis(t)
		ctx := context.Background()
		id := create(t, st, "chat", `{}`)
		if err := rdb.Del(ctx, jobs.JobKey(id)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(ctx, jobs.JobKey(id), "not a hash", 0).Err(); err != nil {
			t.Fatal(err)
		}
		s := testSettings()
		s.ClaimIdle = 200 * time.Millisecond
		s.ClaimInterval = 50 * time.Millisecond
		rounds := recoveryRounds(rdb)
		startPool(t, rdb, st, "w1", s, backend.NewRegistry(nil))
		waitDelivered(t, rdb, 10*time.Second)
		waitNoPending(t, rdb, 10*time.Second)
		waitRounds(t, rounds, 6)
		dead := rdb.XRange(ctx, jobs.DeadStream, "-", "+").Val()
		if len(dead) != 1 || dead[0].Values["job_id"] != id || dead[0].Values["reason"] != CodeUnknownStatus {
			t.Fatalf("jobs:dead = %v", dead)
		}
		if v := rdb.Get(ctx, jobs.JobKey(id)).Val(); v != "not a hash" {
			t.Fatalf("job key now %q", v)
		}
	})
}

// A job key that stops being a hash while the job runs is heard by the
// status poll like a status outside the state machine: the backend call
// stops and the message is dead-lettered once, the key left as it is.
func TestJobKeyNotAHashWhileRunning(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		rdb, st, _ := newRedis(t)
		ctx := context.Background()
		b := newBlocking()
		startPool(t, rdb, st, "w1", testSettings(), backend.NewRegistry(map[string]backend.Backend{"code": b}))
		id := create(t, st, "code", `{}`)
		<-b.started
		if err := rdb.Del(ctx, jobs.JobKey(id)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.Set(ctx, jobs.JobKey(id), "not a hash", 0).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-b.stopped:
		case <-time.After(3 * time.Second):
			t.Fatal("backend call not abandoned")
		}
		waitNoPending(t, rdb, 3*time.Second)
		dead := rdb.XRange(ctx, jobs.DeadStream, "-", "+").Val()
		if len(dead) != 1 || dead[0].Values["job_id"] != id || dead[0].Values["reason"] != CodeUnknownStatus {
			t.Fatalf("jobs:dead = %v", dead)
		}
		if v := rdb.Get(ctx, jobs.JobKey(id)).Val(); v != "not a hash" {
			t.Fatalf("job key now %q", v)
		}
	})
}

// recoveryRounds counts the commands rdb sends that start a recovery
// round's look at the pending list, whichever the claimer.
func recoveryRounds(rdb *redis.Client) *testsvc.CommandCounter {
	c := &testsvc.CommandCounter{Match: func(cmd redis.Cmder) bool {
		return cmd.Name() == "xautoclaim" || cmd.Name() == "xpending"
	}}
	rdb.AddHook(c)
	return c
}

// waitRounds waits for n more of the commands c counts: recovery rounds
// that ran, rather than a sleep a stalled machine may not fill with any.
func waitRounds(t *testing.T, c *testsvc.CommandCounter, n int64) {
	t.Helper()
	want := c.N() + n
	deadline := time.Now().Add(10 * time.Second)
	for c.N() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%d recovery commands in 10s, want %d", n-(want-c.N()), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
