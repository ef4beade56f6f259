package worker

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// Every command a worker pool sends exists in Redis 6.0, except XAUTOCLAIM,
// which only the recovery path chosen after INFO server names Redis ≥ 6.2
// sends. The flow covers start and finish, a backend error, a cancel of a
// running job (pub/sub), the lease heartbeat, recovery of an orphaned job,
// dead-lettering and shutdown.
func TestWorkerCommandsRunOnRedis60(t *testing.T) {
	testsvc.EachRedis(t, testWorkerCommandsRunOnRedis60)
}

func testWorkerCommandsRunOnRedis60(t *testing.T) {
	for _, fallback := range []bool{true, false} {
		name := "XPENDING+XCLAIM"
		if !fallback {
			name = "XAUTOCLAIM"
		}
		t.Run(name, func(t *testing.T) {
			rdb, _, opts := newRedis(t)
			ctx := context.Background()
			if !fallback && !SupportsAutoClaim(rdb.Info(ctx, "server").Val()) {
				t.Skip("server has no XAUTOCLAIM")
			}
			cmds := testsvc.NewCommandLog()
			ro := *opts
			cmds.Attach(&ro)
			rec := redis.NewClient(&ro)
			t.Cleanup(func() { _ = rec.Close() })
			rec.AddHook(cmds)
			st := jobs.NewStore(rec)
			plain := jobs.NewStore(rdb) // test scaffolding, not recorded

			orphaned := create(t, plain, "chat", `{"n":1}`)
			orphan(t, rdb, plain, orphaned, 0)
			poisoned := create(t, plain, "chat", `{"poison":true}`)
			orphan(t, rdb, plain, poisoned, 2)

			s := testSettings()
			s.ClaimFallback = fallback
			s.MaxDeliveries = 3
			b := newBlocking()
			p, err := New(nil, rec, st, "w1", s, backend.NewRegistry(map[string]backend.Backend{
				"chat": backend.Func(func(context.Context, backend.Request, backend.Delta) (json.RawMessage, error) {
					return json.RawMessage(`{"ok":true}`), nil
				}),
				"tool": backend.Func(func(context.Context, backend.Request, backend.Delta) (json.RawMessage, error) {
					return nil, backend.Errorf(backend.CodeBackendError, 1, "exit 1")
				}),
				"code": b,
			}))
			if err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- p.Run(runCtx) }()
			defer stop()

			ok := create(t, plain, "chat", `{}`)
			failed := create(t, plain, "tool", `{}`)
			long := create(t, plain, "code", `{}`)
			<-b.started
			// Outlive a heartbeat (ClaimIdle/3) before the cancel.
			time.Sleep(2 * s.ClaimIdle / 3)
			if _, err := plain.Cancel(ctx, long, "test", "stop"); err != nil {
				t.Fatal(err)
			}
			for id, want := range map[string]string{orphaned: jobs.Done, poisoned: jobs.Error, ok: jobs.Done, failed: jobs.Error, long: jobs.Canceled} {
				if j := waitTerminal(t, plain, id, 5*time.Second); j.Status != want {
					t.Errorf("job %s: %s, want %s", id, j.Status, want)
				}
			}
			waitNoPending(t, rdb, 3*time.Second)
			stop()
			if err := <-done; err != nil {
				t.Fatal(err)
			}

			t.Logf("commands sent: %v", cmds.Names())
			// Dead-lettering is a script (XADD to jobs:dead, XACK, XDEL);
			// acknowledging cancelled jobs is a MULTI.
			want := []string{"XREADGROUP", "EVALSHA", "PSUBSCRIBE", "XPENDING", "XCLAIM", "XRANGE", "MULTI", "XACK", "XDEL", "EXEC"}
			if fallback {
				cmds.CheckRedis60(t)
			} else {
				cmds.CheckRedis60(t, "XAUTOCLAIM")
				want = append(want, "XAUTOCLAIM", "INFO")
			}
			for _, w := range want {
				if !cmds.Sent(w) {
					t.Errorf("flow did not send %s", w)
				}
			}
		})
	}
}

// The Lua scripts of this package call only Redis 6.0 commands.
func TestWorkerScriptsUseRedis60Commands(t *testing.T) {
	found := testsvc.CheckLuaRedis60(t, ".")
	for _, want := range []string{"XPENDING", "XCLAIM", "XADD", "XACK", "XDEL"} {
		if !slices.Contains(found, want) {
			t.Errorf("scan found %v, missing %s", found, want)
		}
	}
}
