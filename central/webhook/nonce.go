package webhook

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"
)

// NonceStore remembers nonces of verified requests. Remember records nonce
// until expires and returns an error wrapping ErrReplayedNonce if it is
// already remembered (and not yet expired) — atomically, so two concurrent
// requests with one nonce cannot both pass. A store shared by several
// receiver replicas (Redis SET NX PX, a SQL unique key) implements the same
// method.
type NonceStore interface {
	Remember(ctx context.Context, nonce string, expires, now time.Time) error
}

// DefaultNonceCapacity bounds the in-memory store: about 64 bytes per entry,
// so ~16 MiB; enough for ~400 requests/s over a 10 minute window.
const DefaultNonceCapacity = 1 << 18

// MemoryNonces is an in-memory NonceStore with bounded memory. Entries are
// kept in arrival order and dropped once expired. When it holds capacity
// unexpired nonces it fails closed with ErrNonceStoreFull rather than
// forgetting a nonce that could still be replayed; the sender retries later.
type MemoryNonces struct {
	mu       sync.Mutex
	capacity int
	seen     map[[16]byte]time.Time
	order    []nonceEntry // ring buffer in arrival order
	head, n  int
}

type nonceEntry struct {
	key     [16]byte
	expires time.Time
}

// NewMemoryNonces returns a store holding at most capacity nonces.
func NewMemoryNonces(capacity int) *MemoryNonces {
	if capacity < 1 {
		capacity = 1
	}
	return &MemoryNonces{capacity: capacity, seen: make(map[[16]byte]time.Time), order: make([]nonceEntry, capacity)}
}

func nonceKey(nonce string) [16]byte {
	sum := sha256.Sum256([]byte(nonce))
	var k [16]byte
	copy(k[:], sum[:16])
	return k
}

// Remember implements NonceStore.
func (m *MemoryNonces) Remember(_ context.Context, nonce string, expires, now time.Time) error {
	k := nonceKey(nonce)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire(now)
	if exp, ok := m.seen[k]; ok && now.Before(exp) {
		return ErrReplayedNonce
	}
	if m.n == m.capacity {
		return fmt.Errorf("%w: %d unexpired nonces", ErrNonceStoreFull, m.capacity)
	}
	m.seen[k] = expires
	m.order[(m.head+m.n)%m.capacity] = nonceEntry{key: k, expires: expires}
	m.n++
	return nil
}

// expire drops expired entries from the front. Arrival order is expiry order
// when now only moves forward; if it does not, an entry may outlive its
// expiry a little, which is the safe direction.
func (m *MemoryNonces) expire(now time.Time) {
	for m.n > 0 {
		e := m.order[m.head]
		if now.Before(e.expires) {
			return
		}
		if exp, ok := m.seen[e.key]; ok && !now.Before(exp) {
			delete(m.seen, e.key)
		}
		m.order[m.head] = nonceEntry{}
		m.head = (m.head + 1) % m.capacity
		m.n--
	}
}

// Len is the number of nonces currently held.
func (m *MemoryNonces) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n
}
