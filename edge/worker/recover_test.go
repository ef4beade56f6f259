package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// Idle pending entries behind more live ones than one XPENDING page holds
// are found: recovery pages through the whole pending list (the Redis 6.0
// path has no XAUTOCLAIM to do it).
func TestRecoveryPagesThroughPendingList(t *testing.T) {
	testsvc.EachRedis(t, testRecoveryPagesThroughPendingList)
}

func testRecoveryPagesThroughPendingList(t *testing.T) {
	eachClaimer(t, func(t *testing.T, rdb *redis.Client, st *jobs.Store, fallback bool) {
		ctx := context.Background()
		const live, orphans = 250, 3
		for range live + orphans {
			create(t, st, "chat", `{}`)
		}
		// Everything is delivered to a consumer that then dies ...
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: jobs.Group, Consumer: "dead",
			Streams: []string{jobs.QueueStream, ">"}, Count: live + orphans}).Result()
		if err != nil || len(res[0].Messages) != live+orphans {
			t.Fatalf("read: %v", err)
		}
		var liveIDs, orphanIDs []string
		for i, m := range res[0].Messages {
			if i < live {
				liveIDs = append(liveIDs, m.ID)
			} else {
				orphanIDs = append(orphanIDs, m.ID)
			}
		}
		s := testSettings()
		s.ClaimFallback = fallback
		s.ClaimIdle = time.Minute
		makeIdle(t, rdb, "dead", orphanIDs...)
		// ... except that a live worker owns the first entries: they are
		// not idle, and they sit before the idle ones.
		if err := rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: jobs.QueueStream, Group: jobs.Group,
			Consumer: "alive", MinIdle: 0, Messages: liveIDs}).Err(); err != nil {
			t.Fatal(err)
		}
		p, err := New(nil, rdb, st, "rescuer", s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if p.claimer, err = p.chooseClaimer(ctx); err != nil {
			t.Fatal(err)
		}
		var got []string
		for range 10 { // XAUTOCLAIM walks its cursor in steps
			es, _, err := p.claimer.claim(ctx, s.ClaimIdle, 16)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range es {
				got = append(got, e.msg.ID)
			}
			if len(got) >= orphans {
				break
			}
		}
		slices.Sort(got)
		slices.Sort(orphanIDs) // as strings, like got
		if !slices.Equal(got, orphanIDs) {
			t.Fatalf("%s claimed %v, want the idle %v", p.claimer.name(), got, orphanIDs)
		}
	})
}

// The recovery path is chosen from the server's version: a real Redis 6.0
// gets XPENDING+XCLAIM without being forced, a newer server XAUTOCLAIM.
func TestClaimerChosenByServer(t *testing.T) { testsvc.EachRedis(t, testClaimerChosenByServer) }

func testClaimerChosenByServer(t *testing.T) {
	rdb, st, _ := newRedis(t)
	p, err := New(nil, rdb, st, "w", testSettings(), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.chooseClaimer(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := "XAUTOCLAIM"
	if testsvc.IsRedis60(t) {
		want = "XPENDING+XCLAIM"
	}
	if c.name() != want {
		t.Fatalf("claimer %s, want %s", c.name(), want)
	}
}

// An entry this pool is still running, whose heartbeat came late, is not
// claimed as recovered work and its delivery count stays as it was: each
// late heartbeat must not bring a live job closer to the dead letters.
func TestRecoverySkipsEntriesStillRunningHere(t *testing.T) {
	testsvc.EachRedis(t, testRecoverySkipsEntriesStillRunningHere)
}

func testRecoverySkipsEntriesStillRunningHere(t *testing.T) {
	eachClaimer(t, func(t *testing.T, rdb *redis.Client, st *jobs.Store, fallback bool) {
		ctx := context.Background()
		create(t, st, "chat", `{}`)
		s := testSettings()
		s.ClaimFallback = fallback
		s.ClaimIdle = time.Minute
		p, err := New(nil, rdb, st, "me", s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if p.claimer, err = p.chooseClaimer(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: jobs.Group, Consumer: "me",
			Streams: []string{jobs.QueueStream, ">"}, Count: 1}).Result()
		if err != nil || len(res[0].Messages) != 1 {
			t.Fatalf("read: %v", err)
		}
		id := res[0].Messages[0].ID
		p.mu.Lock()
		p.byMsg[id] = &job{msgID: id} // running here
		p.mu.Unlock()
		makeIdle(t, rdb, "me", id) // its heartbeat is late
		for range 3 {
			es, _, err := p.claimer.claim(ctx, s.ClaimIdle, 16)
			if err != nil {
				t.Fatal(err)
			}
			if len(es) != 0 {
				t.Fatalf("%s claimed %d entries, among them the one running here", p.claimer.name(), len(es))
			}
		}
		pend, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: jobs.QueueStream, Group: jobs.Group,
			Start: "-", End: "+", Count: 10}).Result()
		if err != nil || len(pend) != 1 || pend[0].RetryCount != 1 {
			t.Fatalf("pending %+v, %v: want the entry delivered once", pend, err)
		}
	})
}

// makeIdle makes the pending entries ids, delivered to consumer, idle for an
// hour (XCLAIM IDLE; JUSTID leaves their delivery counts as they are). An
// entry's idle time only grows while the test waits, whereas a live one
// sleeping out a short ClaimIdle could go idle too on a stalled machine:
// with a long ClaimIdle only the entries made idle here are.
func makeIdle(t testing.TB, rdb *redis.Client, consumer string, ids ...string) {
	t.Helper()
	args := []any{"XCLAIM", jobs.QueueStream, jobs.Group, consumer, 0}
	for _, id := range ids {
		args = append(args, id)
	}
	args = append(args, "IDLE", time.Hour.Milliseconds(), "JUSTID")
	got, err := rdb.Do(context.Background(), args...).StringSlice()
	if err != nil || len(got) != len(ids) {
		t.Fatalf("XCLAIM IDLE %v: %v %v", ids, got, err)
	}
}

// eachClaimer runs fn as a subtest per recovery path: the XPENDING+XCLAIM
// fallback, and XAUTOCLAIM where the server has it.
func eachClaimer(t *testing.T, fn func(t *testing.T, rdb *redis.Client, st *jobs.Store, fallback bool)) {
	for _, fallback := range []bool{true, false} {
		t.Run(fmt.Sprintf("fallback=%v", fallback), func(t *testing.T) {
			rdb, st, _ := newRedis(t)
			if !fallback && !SupportsAutoClaim(rdb.Info(context.Background(), "server").Val()) {
				t.Skip("server has no XAUTOCLAIM")
			}
			fn(t, rdb, st, fallback)
		})
	}
}

// A claim that fails for one entry leaves the others it claimed with it
// running now, not waiting, pending here, until they are idle again. The
// failure is each entry's own: XCLAIM's (the claim went through, its answer
// was lost) or the XRANGE that reads a claimed entry.
func TestRecoveryFailureOfOneEntryKeepsTheOthers(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		cases := []struct {
			failing  string
			fallback bool
		}{
			{"XCLAIM", true}, {"XRANGE", true},
			{"XCLAIM", false}, // the delivery count written back after XAUTOCLAIM
			{"XRANGE", false},
		}
		for _, c := range cases {
			failing := c.failing
			t.Run(fmt.Sprintf("%s/fallback=%v", failing, c.fallback), func(t *testing.T) {
				ctx := context.Background()
				rdb, st, opts := newRedis(t)
				if !c.fallback && !SupportsAutoClaim(rdb.Info(ctx, "server").Val()) {
					t.Skip("server has no XAUTOCLAIM")
				}
				for range 3 {
					create(t, st, "chat", `{}`)
				}
				res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: jobs.Group, Consumer: "dead",
					Streams: []string{jobs.QueueStream, ">"}, Count: 3}).Result()
				if err != nil || len(res[0].Messages) != 3 {
					t.Fatalf("read: %v", err)
				}
				ids := []string{res[0].Messages[0].ID, res[0].Messages[1].ID, res[0].Messages[2].ID}
				s := testSettings()
				s.ClaimFallback = c.fallback
				s.ClaimIdle = time.Minute
				makeIdle(t, rdb, "dead", ids...)

				ro := *opts
				faulty := redis.NewClient(&ro)
				t.Cleanup(func() { _ = faulty.Close() })
				faulty.AddHook(failFor{cmd: failing, id: ids[1]})
				p, err := New(nil, faulty, jobs.NewStore(faulty), "rescuer", s, nil)
				if err != nil {
					t.Fatal(err)
				}
				if p.claimer, err = p.chooseClaimer(ctx); err != nil {
					t.Fatal(err)
				}
				es, _, err := p.claimer.claim(ctx, s.ClaimIdle, 16)
				if err == nil {
					t.Fatalf("claim: no error from the failed %s", failing)
				}
				var got []string
				for _, e := range es {
					got = append(got, e.msg.ID)
				}
				if want := []string{ids[0], ids[2]}; !slices.Equal(got, want) {
					t.Fatalf("claimed %v (%v), want the entries that did not fail %v", got, err, want)
				}
			})
		}
	})
}

// failFor makes the pipelined command named cmd about id fail, after it
// ran: its answer lost on the way.
type failFor struct{ cmd, id string }

func (failFor) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (failFor) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (f failFor) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			args := c.Args()
			if len(args) >= 4 && strings.EqualFold(fmt.Sprint(args[0]), f.cmd) && slices.ContainsFunc(args, func(a any) bool { return fmt.Sprint(a) == f.id }) {
				c.SetErr(errors.New("answer lost"))
				if err == nil {
					err = c.Err() // as a pipeline reports its first failed command
				}
			}
		}
		return err
	}
}
