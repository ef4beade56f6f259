package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

func TestApplyBatch(t *testing.T) { testsvc.EachRedis(t, testApplyBatch) }

func testApplyBatch(t *testing.T) {
	rdb, _ := testsvc.Redis(t)
	st := NewStore(rdb)
	ctx := context.Background()
	var ids []string
	for range 3 {
		c, err := st.Create(ctx, NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	if _, err := st.Cancel(ctx, ids[1], "test", "x"); err != nil {
		t.Fatal(err)
	}
	// A flushed script cache must not break a batch (NOSCRIPT is retried with EVAL).
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	ops := []Op{
		{ID: ids[0], T: Transition{To: Running, Step: "s"}},
		{ID: ids[1], T: Transition{To: Running, Step: "s"}},
		{ID: "no-such-job", T: Transition{To: Running, Step: "s"}},
		{ID: ids[2], T: Transition{EventType: Done}}, // invalid before reaching Redis
	}
	res := st.ApplyBatch(ctx, ops)
	if res[0].Err != nil || res[0].EventID == "" {
		t.Fatalf("op 0: %+v", res[0])
	}
	if !errors.Is(res[1].Err, ErrFinished) || !IsGone(res[1].Err) {
		t.Fatalf("op 1: %v", res[1].Err)
	}
	if !errors.Is(res[2].Err, ErrNotFound) || !IsGone(res[2].Err) {
		t.Fatalf("op 2: %v", res[2].Err)
	}
	if res[3].Err == nil || IsGone(res[3].Err) {
		t.Fatalf("op 3: %v", res[3].Err)
	}
	j, err := st.Get(ctx, ids[0])
	if err != nil || j.Status != Running {
		t.Fatalf("job 0: %+v %v", j, err)
	}
}
