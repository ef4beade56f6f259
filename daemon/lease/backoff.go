package lease

import (
	"math/rand/v2"
	"time"
)

// Backoff is exponential backoff with full jitter: the n-th retry (n from 1)
// waits a uniformly random time in [0, min(Cap, Base*2^(n-1))). Full jitter
// spreads a thundering herd of retries better than equal or decorrelated
// jitter for the same mean wait.
type Backoff struct {
	Base time.Duration
	Cap  time.Duration
	// Rand returns a float in [0,1); nil uses math/rand/v2. Tests fix it.
	Rand func() float64
}

// Ceiling is the upper bound of the wait before retry n, without jitter.
func (b Backoff) Ceiling(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	d := b.Base
	for i := 1; i < n; i++ {
		if d >= b.Cap/2 {
			return b.Cap
		}
		d *= 2
	}
	if d > b.Cap {
		return b.Cap
	}
	return d
}

// Delay is the jittered wait before retry n.
func (b Backoff) Delay(n int) time.Duration {
	r := b.Rand
	if r == nil {
		r = rand.Float64
	}
	return time.Duration(r() * float64(b.Ceiling(n)))
}

// HeartbeatInterval is how often a lease of ttl is renewed: a third of it,
// so two heartbeats can be lost before the lease expires.
func HeartbeatInterval(ttl time.Duration) time.Duration { return ttl / 3 }
