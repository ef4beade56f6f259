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
	return time.Duration(b.rand() * float64(b.Ceiling(n)))
}

// Larger is the wait of the larger bucket before retry n (a receiver's 429,
// or a 503 without Retry-After): uniformly random in [Ceiling(n),
// Ceiling(n+2)), never above Cap and, below it, never under the longest
// wait a regular retry of the same number could draw. Once Ceiling(n) is
// Cap that range is empty, and every retry throttled from then on would
// wait exactly Cap: the retries a receiver's rate limit turned away would
// come back together, in lockstep, for as long as it lasts. There the
// wait is drawn from [Cap/2, Cap) instead, longer than half the waits a
// regular retry draws at the cap.
func (b Backoff) Larger(n int) time.Duration {
	lo, hi := b.Ceiling(n), b.Ceiling(n+2)
	if hi <= lo {
		lo = hi / 2
	}
	return lo + time.Duration(b.rand()*float64(hi-lo))
}

func (b Backoff) rand() float64 {
	if b.Rand != nil {
		return b.Rand()
	}
	return rand.Float64()
}

// HeartbeatInterval is how often a lease of ttl is renewed: a third of it,
// so two heartbeats can be lost before the lease expires.
func HeartbeatInterval(ttl time.Duration) time.Duration { return ttl / 3 }
