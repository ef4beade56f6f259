package worker

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/backend"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

func TestParseAutoClaim(t *testing.T) {
	tests := []struct {
		name         string
		res          []any
		next         string
		ids, deleted []string
		bad          bool
	}{
		{"redis 6.2", []any{"0-0", []any{"1-0", "2-0"}}, "0-0", []string{"1-0", "2-0"}, nil, false},
		{"redis 7", []any{"5-0", []any{"1-0"}, []any{"2-0"}}, "5-0", []string{"1-0"}, []string{"2-0"}, false},
		{"too short", []any{"0-0"}, "", nil, nil, true},
		{"cursor not a string", []any{int64(0), []any{}}, "", nil, nil, true},
		{"ids not strings", []any{"0-0", []any{int64(1)}}, "", nil, nil, true},
		{"deleted not an array", []any{"0-0", []any{}, "2-0"}, "", nil, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			next, ids, deleted, err := parseAutoClaim(tc.res)
			if (err != nil) != tc.bad {
				t.Fatalf("err = %v, want error %v", err, tc.bad)
			}
			if next != tc.next || !slices.Equal(ids, tc.ids) || !slices.Equal(deleted, tc.deleted) {
				t.Errorf("got %q %v %v", next, ids, deleted)
			}
		})
	}
}

// An entry XPENDING listed as idle and its owner then finished (acked and
// deleted) before the XCLAIM is the ordinary end of a late job, on every
// server: nothing is logged. An entry deleted while still pending is
// reported, by readClaimed before Redis 7 and by take from 7 on.
func TestFinishedBeforeTheClaimIsNotReported(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		rdb, st, _ := newRedis(t)
		ctx := context.Background()
		finished := orphan(t, rdb, st, create(t, st, "chat", `{}`), 0)
		deleted := orphan(t, rdb, st, create(t, st, "chat", `{}`), 0)
		logs := &testsvc.LogBuffer{}
		s := testSettings()
		s.ClaimFallback = true
		p, err := New(slog.New(slog.NewJSONHandler(logs, nil)), rdb, st, "me", s, backend.NewRegistry(nil))
		if err != nil {
			t.Fatal(err)
		}
		cl, err := p.chooseClaimer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pc := cl.(*pendingClaimer)
		idle, err := pc.idle(ctx, 0, 10)
		if err != nil || len(idle) != 2 {
			t.Fatalf("idle entries %v: %v", idle, err)
		}
		if err := st.Ack(ctx, finished); err != nil {
			t.Fatal(err)
		}
		if err := rdb.XDel(ctx, jobs.QueueStream, deleted).Err(); err != nil {
			t.Fatal(err)
		}
		got, err := pc.take(ctx, 0, idle)
		if err != nil || len(got) != 0 {
			t.Fatalf("took %v: %v", got, err)
		}
		if loggedVanished(logs.String(), finished) {
			t.Errorf("the finished entry %s was reported:\n%s", finished, logs)
		}
		if !loggedVanished(logs.String(), deleted) {
			t.Errorf("the deleted entry %s was not reported:\n%s", deleted, logs)
		}
	})
}
