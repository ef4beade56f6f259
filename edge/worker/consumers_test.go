package worker

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// Consumers that have no pending entries and have been idle for
// ConsumerMaxIdle are deleted; the pool's own consumer, consumers with
// pending entries (however old) and recently active ones are kept. The
// check is made again atomically with the delete: a consumer handed an
// entry after it was listed is not deleted.
func TestPruneIdleConsumers(t *testing.T) { testsvc.EachRedis(t, testPruneIdleConsumers) }

func testPruneIdleConsumers(t *testing.T) {
	rdb, st, _ := newRedis(t)
	ctx := context.Background()
	// A consumer exists once it has been delivered something.
	read := func(consumer string, ack bool) {
		t.Helper()
		create(t, st, "chat", `{}`)
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: jobs.Group, Consumer: consumer,
			Streams: []string{jobs.QueueStream, ">"}, Count: 1, Block: -1}).Result()
		if err != nil || len(res[0].Messages) != 1 {
			t.Fatalf("read: %v %v", res, err)
		}
		if ack {
			if err := st.Ack(ctx, res[0].Messages[0].ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	read("self", true)        // this pool, idle as long as the dead ones
	read("dead-empty", true)  // a previous life that left nothing behind
	read("dead-empty2", true) // another one
	read("dead-busy", false)  // died holding an entry
	s := testSettings()
	// A consumer's idle time is the server's to count: the dead ones age
	// for real. The limit is long beside the few commands between the
	// fresh consumer's last read and the listing, so a stalled machine
	// does not age that one too.
	s.ConsumerMaxIdle = 3 * time.Second
	waitConsumersIdle(t, rdb, s.ConsumerMaxIdle, "self", "dead-empty", "dead-empty2", "dead-busy")
	read("fresh", true) // alive, recently active
	p, err := New(nil, rdb, st, "self", s, nil)
	if err != nil {
		t.Fatal(err)
	}

	// Between listing and deleting, dead-empty2 is handed an entry.
	create(t, st, "chat", `{}`)
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: jobs.Group, Consumer: "fresh",
		Streams: []string{jobs.QueueStream, ">"}, Count: 1, Block: -1}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: jobs.QueueStream, Group: jobs.Group,
		Consumer: "dead-empty2", MinIdle: 0, Messages: []string{res[0].Messages[0].ID}}).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := p.deleteConsumer(ctx, "dead-empty2"); err != nil || ok {
		t.Fatalf("deleted a consumer holding a pending entry: %v %v", ok, err)
	}
	if ok, err := p.deleteConsumer(ctx, "self"); err != nil || ok {
		t.Fatalf("deleted its own consumer: %v %v", ok, err)
	}

	gone, err := p.pruneConsumers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(gone, []string{"dead-empty"}) {
		t.Fatalf("deleted %v, want [dead-empty]", gone)
	}
	var left []string
	for _, c := range rdb.XInfoConsumers(ctx, jobs.QueueStream, jobs.Group).Val() {
		left = append(left, c.Name)
	}
	slices.Sort(left)
	if want := []string{"dead-busy", "dead-empty2", "fresh", "self"}; !slices.Equal(left, want) {
		t.Fatalf("consumers left %v, want %v", left, want)
	}
	if p, err := rdb.XPending(ctx, jobs.QueueStream, jobs.Group).Result(); err != nil || p.Count != 2 {
		t.Fatalf("pending entries lost: %+v %v", p, err)
	}
}

// waitConsumersIdle waits until each of names has been idle for at least d
// by the server's clock.
func waitConsumersIdle(t *testing.T, rdb *redis.Client, d time.Duration, names ...string) {
	t.Helper()
	deadline := time.Now().Add(d + 10*time.Second)
	for {
		infos, err := rdb.XInfoConsumers(context.Background(), jobs.QueueStream, jobs.Group).Result()
		if err != nil {
			t.Fatal(err)
		}
		aged := 0
		for _, c := range infos {
			if slices.Contains(names, c.Name) && c.Idle >= d {
				aged++
			}
		}
		if aged == len(names) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumers %v not idle for %v: %+v", names, d, infos)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
