package testsvc

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// controlClient is a database-0 client on the server of t (see serverFor).
func controlClient(t *testing.T) *redis.Client {
	t.Helper()
	srv := serverFor(t)
	if srv.URL == "" {
		Unavailable(t, srv.Name+" ("+srv.Env+" unset)", errNotConfigured)
	}
	opts, err := redis.ParseURL(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	opts.DB = 0
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		Unavailable(t, "redis at "+srv.URL, err)
	}
	return c
}

// Redis(t) holds the cross-process lock of its database while the test
// runs, so a test in another process cannot be handed (and flush) it, and
// marks the database as written by tests until its cleanup flushed it.
func TestRedisHoldsDatabaseLock(t *testing.T) { EachRedis(t, testRedisHoldsDatabaseLock) }

func testRedisHoldsDatabaseLock(t *testing.T) {
	ctl := controlClient(t)
	var key string
	t.Run("holder", func(t *testing.T) {
		_, opts := Redis(t)
		if opts.DB < 1 || opts.DB > testDBs {
			t.Fatalf("db %d outside 1..%d", opts.DB, testDBs)
		}
		key = fmt.Sprintf("%s%d", dbLockPrefix, opts.DB)
		ttl, err := ctl.PTTL(context.Background(), key).Result()
		if err != nil || ttl <= 0 {
			t.Fatalf("lock %s not held (ttl %v, err %v)", key, ttl, err)
		}
		if ctl.Exists(context.Background(), key+markerSuffix).Val() != 1 {
			t.Fatalf("database %d not marked as written by tests", opts.DB)
		}
	})
	if v, err := ctl.Get(context.Background(), key+markerSuffix).Result(); err == nil && strings.HasPrefix(v, dbOwnerTag) {
		t.Fatalf("marker of %s still there after the cleanup's flush: %s", key, v)
	}
	// Released at cleanup (unless another test took it at once).
	if v, err := ctl.Get(context.Background(), key).Result(); err == nil && strings.HasPrefix(v, dbOwnerTag) {
		t.Fatalf("lock %s still held by this process after the test: %s", key, v)
	}
}

// Concurrent allocations never share a database while held.
func TestAcquireDBExclusive(t *testing.T) {
	ctl := controlClient(t)
	var mu sync.Mutex
	held := map[int]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				ctx, cancel := context.WithTimeout(context.Background(), dbLockWait)
				l, err := acquireDB(ctx, ctl, RedisURL())
				cancel()
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if held[l.DB] {
					errs <- fmt.Errorf("goroutine %d: db %d handed out twice", g, l.DB)
				}
				held[l.DB] = true
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				mu.Lock()
				delete(held, l.DB)
				mu.Unlock()
				if err := l.release(); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A lock that is no longer ours (it expired and someone else took it) is
// left alone by release.
func TestReleaseOnlyOwnLock(t *testing.T) {
	ctl := controlClient(t)
	l, err := acquireDB(context.Background(), ctl, RedisURL())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ctl.Set(ctx, l.key(), "someone-else", dbLockTTL).Err(); err != nil {
		t.Fatal(err)
	}
	defer ctl.Del(ctx, l.key())
	if err := l.release(); err != nil {
		t.Fatal(err)
	}
	if v, _ := ctl.Get(ctx, l.key()).Result(); v != "someone-else" {
		t.Fatalf("lock now %q, want someone-else's lock kept", v)
	}
}
