package operators

import (
	"context"
	"sync"
	"time"
)

// Authenticator resolves an operator token (Store, or a Cache of it).
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (Operator, error)
}

// maxCached bounds a Cache: past it, expired entries are dropped, and if
// none were, all of them (a flood of distinct valid tokens only costs
// lookups again).
const maxCached = 4096

// Cache remembers tokens the Store verified for TTL, so a busy route pays
// one database lookup per token and TTL instead of one per request. The
// price is bounded: a disabled operator's token keeps opening the routes
// behind the cache for at most TTL after Disable (across every pod, since
// each holds its own cache). Unknown and disabled tokens are never cached,
// so a refusal is always current; a database error is never cached either.
// Entries are keyed by the token's SHA-256, never the token.
type Cache struct {
	Store Authenticator
	TTL   time.Duration // zero or less: no caching
	Now   func() time.Time

	mu sync.Mutex
	m  map[string]cached
}

type cached struct {
	op    Operator
	until time.Time
}

// NewCache returns a cache of s with ttl.
func NewCache(s Authenticator, ttl time.Duration) *Cache {
	return &Cache{Store: s, TTL: ttl, Now: time.Now}
}

// Authenticate answers from the cache while an entry is fresh, else asks
// the Store.
func (c *Cache) Authenticate(ctx context.Context, token string) (Operator, error) {
	if c.TTL <= 0 {
		return c.Store.Authenticate(ctx, token)
	}
	key := hashToken(token)
	now := c.Now()
	c.mu.Lock()
	e, ok := c.m[key]
	c.mu.Unlock()
	if ok && now.Before(e.until) {
		return e.op, nil
	}
	op, err := c.Store.Authenticate(ctx, token)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		delete(c.m, key)
		return Operator{}, err
	}
	if c.m == nil {
		c.m = make(map[string]cached)
	}
	if len(c.m) >= maxCached {
		for k, v := range c.m {
			if !now.Before(v.until) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= maxCached {
			clear(c.m)
		}
	}
	c.m[key] = cached{op: op, until: now.Add(c.TTL)}
	return op, nil
}
