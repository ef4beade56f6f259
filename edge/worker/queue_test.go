package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// Every way a job ends removes its queue entry: done, error, cancelled
// before it ran. jobs:stream is left empty, with nothing pending.
func TestFinishedEntriesLeaveQueue(t *testing.T) { testsvc.EachRedis(t, testFinishedEntriesLeaveQueue) }

func testFinishedEntriesLeaveQueue(t *testing.T) {
	rdb, st, _ := newRedis(t)
	ctx := context.Background()
	var ids []string
	for i := range 20 {
		task := "chat"
		if i%4 == 0 {
			task = "code" // fails
		}
		ids = append(ids, create(t, st, task, `{}`))
	}
	if _, err := st.Cancel(ctx, ids[1], "gateway.cancel", "test"); err != nil {
		t.Fatal(err)
	}
	startPool(t, rdb, st, "w1", testSettings(), backend.NewRegistry(map[string]backend.Backend{
		"chat": backend.Func(func(context.Context, backend.Request, backend.Delta) (json.RawMessage, error) {
			return json.RawMessage(`{}`), nil
		}),
		"code": backend.Func(func(context.Context, backend.Request, backend.Delta) (json.RawMessage, error) {
			return nil, backend.Errorf(backend.CodeBackendError, 1, "boom")
		}),
	}))
	for _, id := range ids {
		waitTerminal(t, st, id, 5*time.Second)
	}
	waitNoPending(t, rdb, 3*time.Second)
	if n := rdb.XLen(ctx, jobs.QueueStream).Val(); n != 0 {
		t.Fatalf("%d finished entries left in %s", n, jobs.QueueStream)
	}
}

// A pending entry deleted from the stream (by a trim or by hand) is
// acknowledged by recovery on both claim paths without disturbing the
// recovery of the others; its job cannot be identified any more, and the
// entry's id is logged at error level. On Redis 7 the claim commands take
// such an entry off the pending list themselves: XAUTOCLAIM names it apart
// from the claimed ids, and XCLAIM returns nothing for it; before, both
// paths dropped it there without a word.
func TestRecoveryOfVanishedEntry(t *testing.T) { testsvc.EachRedis(t, testRecoveryOfVanishedEntry) }

func testRecoveryOfVanishedEntry(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		name := "XAUTOCLAIM"
		if fallback {
			name = "XPENDING+XCLAIM"
		}
		t.Run(name, func(t *testing.T) {
			rdb, st, _ := newRedis(t)
			ctx := context.Background()
			if !fallback && !SupportsAutoClaim(rdb.Info(ctx, "server").Val()) {
				t.Skip("server has no XAUTOCLAIM")
			}
			lost := create(t, st, "chat", `{}`)
			lostMsg := orphan(t, rdb, st, lost, 0)
			kept := create(t, st, "chat", `{}`)
			orphan(t, rdb, st, kept, 0)
			if err := rdb.XDel(ctx, jobs.QueueStream, lostMsg).Err(); err != nil {
				t.Fatal(err)
			}
			s := testSettings()
			s.ClaimFallback = fallback
			logs := &testsvc.LogBuffer{}
			startPoolLog(t, slog.New(slog.NewJSONHandler(logs, nil)), rdb, st, "survivor", s, backend.NewRegistry(map[string]backend.Backend{
				"chat": backend.Func(func(context.Context, backend.Request, backend.Delta) (json.RawMessage, error) {
					return json.RawMessage(`{}`), nil
				}),
			}))
			if j := waitTerminal(t, st, kept, 5*time.Second); j.Status != jobs.Done {
				t.Fatalf("kept job %s", j.Status)
			}
			waitNoPending(t, rdb, 3*time.Second)
			if j, err := st.Get(ctx, lost); err != nil || j.Status != jobs.Running {
				t.Fatalf("lost job: %v %v", j, err)
			}
			for deadline := time.Now().Add(3 * time.Second); !loggedVanished(logs.String(), lostMsg); time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("no error naming %s in the log:\n%s", lostMsg, logs)
				}
			}
		})
	}
}

func TestValidateAgainstDaemonSettings(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*Settings)
		grace   time.Duration
		jobTTL  time.Duration
		setting string
	}{
		{"defaults", func(*Settings) {}, 10 * time.Second, 24 * time.Hour, ""},
		{"drain equals grace", func(s *Settings) { s.Drain = 10 * time.Second }, 10 * time.Second, time.Hour, "EUTERPE_WORKER_DRAIN"},
		{"drain above grace", func(s *Settings) { s.Drain = time.Minute }, 10 * time.Second, time.Hour, "EUTERPE_WORKER_DRAIN"},
		{"no drain, no grace", func(s *Settings) { s.Drain = 0 }, 0, time.Hour, ""},
		{"claim idle beyond job ttl", func(s *Settings) { s.ClaimIdle = 2 * time.Minute }, 10 * time.Second, time.Minute, "EUTERPE_CLAIM_IDLE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := DefaultSettings()
			tc.mod(&s)
			err := s.Validate(tc.grace, tc.jobTTL)
			if tc.setting == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var se *daemon.SettingError
			if !errors.As(err, &se) || se.Setting != tc.setting {
				t.Fatalf("err = %v, want a SettingError naming %s", err, tc.setting)
			}
		})
	}
}

// loggedVanished reports whether logs (JSON lines) hold an error naming id
// among its "ids".
func loggedVanished(logs, id string) bool {
	for _, line := range strings.Split(logs, "\n") {
		var rec struct {
			Level string   `json:"level"`
			IDs   []string `json:"ids"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Level == "ERROR" && slices.Contains(rec.IDs, id) {
			return true
		}
	}
	return false
}
