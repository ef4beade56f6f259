package operators_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/operators"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// TestCacheDisableBound: a cached token keeps working after Disable for at
// most the TTL, then is refused; an unknown token is never cached.
func TestCacheDisableBound(t *testing.T) {
	sqltest.Each(t, sets(), func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		s := operators.New(db)
		c, err := s.Create(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		var mu sync.Mutex
		cache := operators.NewCache(s, 5*time.Second)
		cache.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

		if op, err := cache.Authenticate(ctx, c.Token); err != nil || op.ID != c.OperatorID {
			t.Fatalf("authenticate: %+v %v", op, err)
		}
		if err := s.Disable(ctx, c.OperatorID); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Authenticate(ctx, c.Token); !errors.Is(err, operators.ErrUnknownToken) {
			t.Fatalf("store still accepts a disabled token: %v", err)
		}
		advance(4 * time.Second)
		if _, err := cache.Authenticate(ctx, c.Token); err != nil {
			t.Fatalf("within the TTL the cached answer stands: %v", err)
		}
		advance(time.Second)
		if _, err := cache.Authenticate(ctx, c.Token); !errors.Is(err, operators.ErrUnknownToken) {
			t.Fatalf("disabled token accepted after the TTL: %v", err)
		}

		// A refusal is never remembered: a token unknown at first is
		// accepted as soon as it exists (here: an operator created after).
		if _, err := cache.Authenticate(ctx, operators.TokenPrefix+"nope"); !errors.Is(err, operators.ErrUnknownToken) {
			t.Fatalf("unknown token: %v", err)
		}

		// Zero TTL: every call asks the store.
		d, err := s.Create(ctx, "bob")
		if err != nil {
			t.Fatal(err)
		}
		direct := operators.NewCache(s, 0)
		if _, err := direct.Authenticate(ctx, d.Token); err != nil {
			t.Fatal(err)
		}
		if err := s.Disable(ctx, d.OperatorID); err != nil {
			t.Fatal(err)
		}
		if _, err := direct.Authenticate(ctx, d.Token); !errors.Is(err, operators.ErrUnknownToken) {
			t.Fatalf("uncached: disabled token accepted: %v", err)
		}
	})
}

// TestCacheConcurrent: many callers at once, some with a valid token and
// some with a bogus one, get consistent answers (run with -race).
func TestCacheConcurrent(t *testing.T) {
	sqltest.Each(t, sets(), func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		s := operators.New(db)
		c, err := s.Create(ctx, "carol")
		if err != nil {
			t.Fatal(err)
		}
		cache := operators.NewCache(s, time.Minute)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < 20; k++ {
					if op, err := cache.Authenticate(ctx, c.Token); err != nil || op.ID != c.OperatorID {
						errs <- errors.Join(err, errors.New("valid token refused"))
						return
					}
					if _, err := cache.Authenticate(ctx, c.Token+"x"); !errors.Is(err, operators.ErrUnknownToken) {
						errs <- errors.Join(err, errors.New("bogus token accepted"))
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	})
}
