package outbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vesta-cx/euterpe/central/requesters"
)

// SecretSource gives the secrets to sign a requester's webhooks with: the
// current one first and, during a rotation's overlap, the previous one. An
// error wrapping requesters.ErrSecretUnopenable alerts on every attempt it
// costs; any other error is taken to heal by itself.
type SecretSource interface {
	Secrets(ctx context.Context, requesterID string, now time.Time) ([][]byte, error)
}

// ErrRequesterDisabled is returned for a requester that is disabled or gone;
// its events are dead-lettered.
var ErrRequesterDisabled = errors.New("requester is disabled or unknown")

// RequesterSecrets is the dispatcher's SecretSource: it reads secrets with
// requesters.Store.SecretsAt (the one reader, shared with the runner's
// signed refresh calls) and caches the opened secrets for TTL (default
// 10 s), so a rotation reaches every dispatcher within that time. An entry
// never outlives the previous secret's overlap.
type RequesterSecrets struct {
	Requesters *requesters.Store
	TTL        time.Duration

	mu    sync.Mutex
	cache map[string]cachedSecrets
}

type cachedSecrets struct {
	secrets [][]byte
	until   time.Time
	err     error
}

// Secrets implements SecretSource.
func (r *RequesterSecrets) Secrets(ctx context.Context, requesterID string, now time.Time) ([][]byte, error) {
	ttl := r.TTL
	if ttl <= 0 {
		ttl = 10 * time.Second
	}
	r.mu.Lock()
	if c, ok := r.cache[requesterID]; ok && now.Before(c.until) {
		r.mu.Unlock()
		return c.secrets, c.err
	}
	r.mu.Unlock()
	secrets, until, err := r.load(ctx, requesterID, now)
	if err != nil && !errors.Is(err, ErrRequesterDisabled) {
		return nil, err // do not cache transient failures
	}
	if until.IsZero() || until.After(now.Add(ttl)) {
		until = now.Add(ttl)
	}
	r.mu.Lock()
	if r.cache == nil {
		r.cache = map[string]cachedSecrets{}
	}
	r.cache[requesterID] = cachedSecrets{secrets: secrets, until: until, err: err}
	r.mu.Unlock()
	return secrets, err
}

// load returns the secrets and, during an overlap, when the previous one
// stops being valid (the cache must not outlive it).
func (r *RequesterSecrets) load(ctx context.Context, requesterID string, now time.Time) ([][]byte, time.Time, error) {
	sec, err := r.Requesters.SecretsAt(ctx, requesterID, now)
	if errors.Is(err, requesters.ErrNotFound) || sec.Disabled {
		return nil, time.Time{}, fmt.Errorf("%w: %s", ErrRequesterDisabled, requesterID)
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	var until time.Time
	if sec.Previous != nil {
		until = sec.Previous.ExpiresAt
	}
	return sec.Keys(), until, nil
}
