package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
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

// flushMidPipeline sends the first k commands of each pipeline, flushes
// the script cache, then sends the rest: a SCRIPT FLUSH (or a restart)
// landing in the middle of a batch.
type flushMidPipeline struct {
	k     int
	flush func(context.Context) error
	once  bool
}

func (h *flushMidPipeline) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *flushMidPipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}

func (h *flushMidPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.once || len(cmds) <= h.k {
			return next(ctx, cmds)
		}
		h.once = true
		err := next(ctx, cmds[:h.k])
		if ferr := h.flush(ctx); ferr != nil {
			return ferr
		}
		if err2 := next(ctx, cmds[h.k:]); err == nil {
			err = err2
		}
		return err
	}
}

func TestApplyBatchScriptFlushedMidway(t *testing.T) {
	testsvc.EachRedis(t, testApplyBatchScriptFlushedMidway)
}

func testApplyBatchScriptFlushedMidway(t *testing.T) {
	rdb, _ := testsvc.Redis(t)
	ctx := context.Background()
	other := redis.NewClient(rdb.Options())
	t.Cleanup(func() { other.Close() })
	st := NewStore(rdb)
	var ids []string
	for range 4 {
		c, err := st.Create(ctx, NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	if _, err := st.Apply(ctx, ids[0], Transition{To: Running, Step: "s"}); err != nil { // loads the script
		t.Fatal(err)
	}
	rdb.AddHook(&flushMidPipeline{k: 2, flush: func(ctx context.Context) error { return other.ScriptFlush(ctx).Err() }})
	ops := []Op{
		{ID: ids[0], T: Transition{To: Done, Step: "s", Result: json.RawMessage(`{}`)}}, // runs before the flush
		{ID: ids[1], T: Transition{To: Running, Step: "s"}},                             // runs before the flush
		{ID: ids[2], T: Transition{To: Running, Step: "s"}},                             // NOSCRIPT, sent again
		{ID: ids[3], T: Transition{To: Running, Step: "s"}},                             // NOSCRIPT, sent again
	}
	for i, r := range st.ApplyBatch(ctx, ops) {
		if r.Err != nil || r.EventID == "" {
			t.Fatalf("op %d: %+v", i, r)
		}
	}
	for i, id := range ids {
		evs, err := st.Events(ctx, id, "0", 100)
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for _, e := range evs {
			n[e.Type]++
		}
		if n[string(Running)] != 1 || n[string(Done)] > 1 {
			t.Fatalf("job %d: events %v, want one running event (and at most one done)", i, n)
		}
	}
}
