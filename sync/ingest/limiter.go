package ingest

import (
	"math"
	"sync"
	"time"
)

// Limiter is a token bucket per edge, in this process: each pod grants an
// edge Rate requests per second with bursts of Burst, so a fleet behind N
// pods may reach N times that. It is a guard against a runaway shipper,
// not a quota; a shared quota would cost a database write per request.
type Limiter struct {
	Rate  float64
	Burst float64

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// maxBuckets bounds the map: only authenticated edges get a bucket, so
// it grows with the fleet; past this, full (idle) buckets are dropped.
const maxBuckets = 100_000

// NewLimiter returns a limiter; rate <= 0 turns it off.
func NewLimiter(rate float64, burst int) *Limiter {
	return &Limiter{Rate: rate, Burst: float64(max(burst, 1)), buckets: map[string]*bucket{}}
}

// Allow takes a token of edge's bucket at now. When none is left it
// returns false and the whole seconds until one is (at least 1).
func (l *Limiter) Allow(edge string, now time.Time) (bool, int) {
	if l == nil || l.Rate <= 0 {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buckets[edge]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			l.evictFull(now)
		}
		b = &bucket{tokens: l.Burst, at: now}
		l.buckets[edge] = b
	}
	if el := now.Sub(b.at).Seconds(); el > 0 {
		b.tokens = math.Min(l.Burst, b.tokens+el*l.Rate)
		b.at = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, max(1, int(math.Ceil((1-b.tokens)/l.Rate)))
}

func (l *Limiter) evictFull(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.at).Seconds()*l.Rate >= l.Burst {
			delete(l.buckets, k)
		}
	}
}
