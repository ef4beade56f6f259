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

// An idle entry an XCLAIM returned nothing for is reported only when it is
// neither pending nor in the stream any more: one another consumer claimed
// first is still pending, and is nothing to report.
func TestUnclaimedEntriesReportedOnlyWhenGone(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		rdb, st, _ := newRedis(t)
		ctx := context.Background()
		taken := orphan(t, rdb, st, create(t, st, "chat", `{}`), 0)
		gone := orphan(t, rdb, st, create(t, st, "chat", `{}`), 0)
		if err := st.Ack(ctx, gone); err != nil { // out of the stream and of the pending list
			t.Fatal(err)
		}
		logs := &testsvc.LogBuffer{}
		p, err := New(slog.New(slog.NewJSONHandler(logs, nil)), rdb, st, "me", testSettings(), backend.NewRegistry(nil))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.checkUnclaimed(ctx, []string{taken, gone}); err != nil {
			t.Fatal(err)
		}
		if !loggedVanished(logs.String(), gone) || loggedVanished(logs.String(), taken) {
			t.Errorf("want an error naming %s only:\n%s", gone, logs)
		}
		if n := rdb.XLen(ctx, jobs.QueueStream).Val(); n != 1 {
			t.Errorf("queue holds %d entries, want the taken one", n)
		}
	})
}
