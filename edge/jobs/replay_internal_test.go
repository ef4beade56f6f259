package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// drawIDs makes Create draw ids, in order, then random ones again, until
// the test ends.
func drawIDs(t *testing.T, ids ...string) {
	saved := newJobID
	t.Cleanup(func() { newJobID = saved })
	newJobID = func() string {
		if len(ids) > 0 {
			id := ids[0]
			ids = ids[1:]
			return id
		}
		return uuid.NewString()
	}
}

// A create that finds a job under the id it drew, other than its own
// earlier run, has met another job: it leaves that job alone and queues
// its own under another id.
func TestCreateOnIDOfAnotherJob(t *testing.T) { testsvc.EachRedis(t, testCreateOnIDOfAnotherJob) }

func testCreateOnIDOfAnotherJob(t *testing.T) {
	rdb, _ := testsvc.Redis(t)
	st := NewStore(rdb)
	ctx := context.Background()
	other, err := st.Create(ctx, NewJob{Task: "plan", Payload: json.RawMessage(`{"a":1}`), TTL: 60})
	if err != nil {
		t.Fatal(err)
	}
	before := rdb.HGetAll(ctx, JobKey(other.ID)).Val()
	drawIDs(t, other.ID)

	c, err := st.Create(ctx, NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
	if err != nil {
		t.Fatal(err)
	}
	if c.ID == other.ID || c.EventID == "" || c.MessageID == "" {
		t.Fatalf("created %+v over job %s", c, other.ID)
	}
	if after := rdb.HGetAll(ctx, JobKey(other.ID)).Val(); len(after) != len(before) || after["task"] != "plan" || after["created_ts"] != before["created_ts"] {
		t.Errorf("the other job's hash changed: %v, was %v", after, before)
	}
	if n := rdb.XLen(ctx, EventsKey(other.ID)).Val(); n != 1 {
		t.Errorf("the other job has %d events, want its own 1", n)
	}
	count := map[string]int{}
	for _, m := range rdb.XRange(ctx, QueueStream, "-", "+").Val() {
		id, _ := m.Values["job_id"].(string)
		count[id]++
	}
	if count[other.ID] != 1 || count[c.ID] != 1 {
		t.Errorf("queue entries by job: %v", count)
	}
}

// newChatJob creates a chat job on a Redis of the test's.
func newChatJob(t *testing.T) (*redis.Client, *Store, Created) {
	t.Helper()
	rdb, _ := testsvc.Redis(t)
	st := NewStore(rdb)
	c, err := st.Create(context.Background(), NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
	if err != nil {
		t.Fatal(err)
	}
	return rdb, st, c
}

// A caller's token makes a write it repeats (after an error that cannot
// tell a lost reply from a refused write) a no-op answered with the first
// event's id, even after the job finished. The hash keeps the last
// appliedKeep tokens only.
func TestTransitionToken(t *testing.T) { testsvc.EachRedis(t, testTransitionToken) }

func testTransitionToken(t *testing.T) {
	rdb, st, c := newChatJob(t)
	ctx := context.Background()
	var tokens, ids []string
	for i := range appliedKeep + 2 {
		tokens = append(tokens, NewToken())
		to := ""
		if i == 0 {
			to = Running
		}
		if i == appliedKeep+1 {
			to = Done
		}
		id, err := st.Apply(ctx, c.ID, Transition{To: to, EventType: "delta", Step: "s", Token: tokens[i]})
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		ids = append(ids, id)
	}
	events := rdb.XLen(ctx, EventsKey(c.ID)).Val()
	for i := 2; i < len(tokens); i++ {
		id, err := st.Apply(ctx, c.ID, Transition{To: Done, Step: "again", Token: tokens[i]})
		if err != nil || id != ids[i] {
			t.Errorf("write %d again: %q, %v; want %q", i, id, err, ids[i])
		}
	}
	if n := rdb.XLen(ctx, EventsKey(c.ID)).Val(); n != events {
		t.Errorf("%d events after the repeats, want %d", n, events)
	}
	if kept := len(strings.Fields(rdb.HGet(ctx, JobKey(c.ID), appliedField).Val())); kept != appliedKeep {
		t.Errorf("the hash keeps %d tokens, want %d", kept, appliedKeep)
	}
	if _, err := st.Apply(ctx, c.ID, Transition{EventType: "delta", Token: tokens[0]}); !errors.Is(err, ErrFinished) {
		t.Errorf("a token no longer kept is a new write: %v, want ErrFinished", err)
	}
	for _, bad := range []string{"a b", "a=b", strings.Repeat("a", maxTokenLen+1)} {
		if _, err := st.Apply(ctx, c.ID, Transition{EventType: "delta", Token: bad}); !errors.Is(err, ErrBadToken) {
			t.Errorf("token %q: %v, want ErrBadToken", bad, err)
		}
	}
}

// A token is matched as a whole entry of the applied field: one that is
// the end or the start of a kept token, or the digits of an event id, is
// a new write; a kept token found after a match inside a longer one still
// answers with its own event; a token no longer kept is a new write.
func TestTransitionTokenMatchesWholeEntries(t *testing.T) {
	testsvc.EachRedis(t, testTransitionTokenMatchesWholeEntries)
}

func testTransitionTokenMatchesWholeEntries(t *testing.T) {
	rdb, st, c := newChatJob(t)
	ctx := context.Background()
	ids := map[string]string{} // token -> event id of its write
	write := func(tok string) string {
		t.Helper()
		id, err := st.Apply(ctx, c.ID, Transition{EventType: "delta", Step: "s", Token: tok})
		if err != nil {
			t.Fatalf("token %q: %v", tok, err)
		}
		return id
	}
	if _, err := st.SetRunning(ctx, c.ID, "w", nil); err != nil {
		t.Fatal(err)
	}
	ids["xab12"] = write("xab12")
	ms, _, _ := strings.Cut(ids["xab12"], "-")
	seen := map[string]bool{ids["xab12"]: true}
	for _, tok := range []string{"ab12", "xab1", "b12", ms} {
		ids[tok] = write(tok)
		if seen[ids[tok]] {
			t.Errorf("token %q answered with event %s of an earlier write", tok, ids[tok])
		}
		seen[ids[tok]] = true
	}
	events := rdb.XLen(ctx, EventsKey(c.ID)).Val()
	// Kept now: ab12 xab1 b12 <ms>. The first "b12=" in the field is inside
	// "ab12=", the second is b12's own entry.
	for _, tok := range []string{"b12", "ab12", ms} {
		if id := write(tok); id != ids[tok] {
			t.Errorf("kept token %q again: event %s, want %s", tok, id, ids[tok])
		}
	}
	if n := rdb.XLen(ctx, EventsKey(c.ID)).Val(); n != events {
		t.Errorf("%d events after repeats, want %d", n, events)
	}
	if id := write("xab12"); id == ids["xab12"] || seen[id] {
		t.Errorf("token pushed out answered with event %s, want a new write", id)
	}
	if n := rdb.XLen(ctx, EventsKey(c.ID)).Val(); n != events+1 {
		t.Errorf("%d events after a token no longer kept, want %d", n, events+1)
	}
}

// Ids drawn twice do not spend the budget for records naming vanished
// jobs: a create whose key names a deleted job, after two draws that met
// another job, still takes the key. Ids that keep colliding are an error,
// not a loop.
func TestCollisionsAndStaleRecordsHaveTheirOwnBudgets(t *testing.T) {
	testsvc.EachRedis(t, testCollisionsAndStaleRecordsHaveTheirOwnBudgets)
}

func testCollisionsAndStaleRecordsHaveTheirOwnBudgets(t *testing.T) {
	rdb, _ := testsvc.Redis(t)
	st := NewStore(rdb)
	ctx := context.Background()
	other, err := st.Create(ctx, NewJob{Task: "plan", Payload: json.RawMessage(`{}`), TTL: 60})
	if err != nil {
		t.Fatal(err)
	}
	gone, err := st.Create(ctx, NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60, IdempotencyKey: "k1", Fingerprint: "f"})
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, JobKey(gone.ID)).Err(); err != nil {
		t.Fatal(err)
	}
	drawIDs(t, other.ID, other.ID)
	c, err := st.Create(ctx, NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60, IdempotencyKey: "k1", Fingerprint: "f"})
	if err != nil {
		t.Fatalf("create after two collisions and a stale record: %v", err)
	}
	if c.ID == other.ID || c.ID == gone.ID || c.Duplicate {
		t.Fatalf("created %+v", c)
	}
	if got := rdb.Get(ctx, IdempotencyKey("k1")).Val(); got != c.ID {
		t.Errorf("key names %q, want the new job %s", got, c.ID)
	}

	newJobID = func() string { return other.ID }
	_, err = st.Create(ctx, NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
	if err == nil || !strings.Contains(err.Error(), "belong to other jobs") {
		t.Fatalf("create with every id taken: %v", err)
	}
}
