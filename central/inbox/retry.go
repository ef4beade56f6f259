package inbox

import (
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
)

// Class is how a failure is retried. Which HTTP statuses of object storage
// fall in which class is central/storage's table (storage.Class, contract
// §5), mapped onto these classes by the runner: one table, not two.
type Class string

const (
	// Retryable failures (423, 500, 502, 503, 504, timeouts, infrastructure)
	// go back to queued after backoff while attempts remain.
	Retryable Class = "retryable"
	// RateLimited (429) retries from the larger backoff bucket.
	RateLimited Class = "rate_limited"
	// AuthExpired (401/403 from storage) calls for a credential refresh; once
	// the refresh budget is spent it is retried like Retryable.
	AuthExpired Class = "auth_expired"
	// Permanent failures (bad input, unsupported media) end in failed.
	Permanent Class = "permanent"
)

// Policy is the retry policy of inbox jobs. Its three counters are kept
// apart: attempt_count (execution attempts, bumped by each claim),
// refresh_attempt_count (credential refreshes within the job), and the
// outbox's own delivery attempt_count.
type Policy struct {
	MaxAttempts        int           // execution attempts before dead_letter (default 5)
	MaxRefreshAttempts int           // credential refreshes per job (default 3)
	Backoff            lease.Backoff // retryable classes
	RateLimited        lease.Backoff // 429: the larger bucket
}

// DefaultPolicy is the policy with the contract's defaults.
func DefaultPolicy() Policy {
	return Policy{
		MaxAttempts:        5,
		MaxRefreshAttempts: 3,
		Backoff:            lease.Backoff{Base: 2 * time.Second, Cap: 5 * time.Minute},
		RateLimited:        lease.Backoff{Base: 30 * time.Second, Cap: 15 * time.Minute},
	}
}

// Delay is the wait before the retry that follows failed attempt n.
func (p Policy) Delay(c Class, attempt int) time.Duration {
	if c == RateLimited {
		// 429 goes straight to the larger bucket: at least its base, plus
		// full jitter up to its ceiling, whatever the attempt number.
		d := p.RateLimited.Base + p.RateLimited.Delay(attempt)
		if d > p.RateLimited.Cap {
			d = p.RateLimited.Cap
		}
		return d
	}
	if c == leaseExpired {
		// A worker that vanished may have been killed by the job itself:
		// requeue no sooner than the backoff base, plus the retryable
		// jitter, so a poison job cannot cycle through the fleet at the
		// pace of the lease TTL.
		return min(p.Backoff.Base+p.Backoff.Delay(attempt), p.Backoff.Cap)
	}
	return p.Backoff.Delay(attempt)
}
