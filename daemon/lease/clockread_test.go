package lease

import (
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// steps is an Elapsed clock that moves by the next of its steps at each
// reading: a reading of the database clock reads it before and after its
// query, so steps pair up as (time since the last reading, round trip).
type steps struct {
	mu  sync.Mutex
	at  time.Duration
	add []time.Duration
}

func (s *steps) elapsed() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.add) > 0 {
		s.at += s.add[0]
		s.add = s.add[1:]
	}
	return s.at
}

func (s *steps) then(add ...time.Duration) {
	s.mu.Lock()
	s.add = append(s.add, add...)
	s.mu.Unlock()
}

// TestClockKeepsTheBetterReading: a reading of the database clock is off
// by half its round trip. The first measurement, with nothing to fall back
// on, takes the best of a few readings rather than the first or none; a
// resync whose readings are all slower than the last measurement is worth
// (a busy server: its estimate would run ahead by half the delay for a
// minute, and the pod judge live leases expired) keeps the last one and
// is not tried again before a reading as slow would be taken; a fast one
// replaces it, and a fast reading needs no second.
func TestClockKeepsTheBetterReading(t *testing.T) {
	sqltest.Each(t, nil, func(t *testing.T, db *sqldb.DB) {
		s := &steps{}
		q := &Queue{DB: db, Elapsed: s.elapsed}
		measure := func(want time.Duration, what string) {
			t.Helper()
			q.resync()
			q.clock.mu.Lock()
			got := q.clock.rtt
			q.clock.mu.Unlock()
			if got != want {
				t.Fatalf("%s: the clock keeps a reading of round trip %s, want %s", what, got, want)
			}
		}
		s.then(0, 2*time.Second, 0, time.Second, 0, 3*time.Second)
		measure(time.Second, "first measurement, every reading slow")
		s.then(time.Minute, 2*time.Second, 0, 2*time.Second, 0, 2*time.Second)
		measure(time.Second, "a resync slower than the last")
		q.clock.mu.Lock()
		wait := time.Until(q.clock.retryAt)
		q.clock.mu.Unlock()
		if wait < ClockResync-5*time.Second {
			t.Fatalf("a resync slower than the last is tried again in %s, not in %s: a slow database would be read every few seconds", wait, ClockResync)
		}
		s.then(time.Minute, 20*time.Millisecond)
		measure(20*time.Millisecond, "a fast resync")
		if len(s.add) != 0 {
			t.Fatalf("a reading within %s was followed by %d more", clockRoundTrip, len(s.add)/2)
		}
	})
}

// TestClockBetter: how a resync's reading compares with the one in force.
func TestClockBetter(t *testing.T) {
	for _, tc := range []struct {
		name      string
		synced    bool
		last, rtt time.Duration
		since     time.Duration // from the last measurement
		want      bool
	}{
		{"none in force", false, 0, 2 * time.Second, 0, true},
		{"within the bound", true, time.Millisecond, 40 * time.Millisecond, time.Minute, true},
		{"slow resync", true, time.Millisecond, 400 * time.Millisecond, time.Minute, false},
		{"distant database", true, 150 * time.Millisecond, 160 * time.Millisecond, time.Minute, true},
		{"last one old", true, time.Millisecond, time.Second, 10 * time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dbClock{synced: tc.synced, rtt: tc.last, mark: time.Hour}
			r := reading{rtt: tc.rtt, mark: time.Hour + tc.since}
			if got := c.better(r); got != tc.want {
				t.Fatalf("better = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestClockUntilBetter: how long a resync slower than the reading in
// force waits before it is tried again.
func TestClockUntilBetter(t *testing.T) {
	c := dbClock{synced: true, rtt: 2 * time.Millisecond, mark: time.Hour}
	for _, tc := range []struct {
		name  string
		rtt   time.Duration
		since time.Duration
		want  time.Duration
	}{
		{"just taken", 102 * time.Millisecond, 0, 50 * time.Second},
		{"half way", 102 * time.Millisecond, 20 * time.Second, 30 * time.Second},
		{"would be taken now", 102 * time.Millisecond, 60 * time.Second, -10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := reading{rtt: tc.rtt, mark: c.mark + tc.since}
			if got := c.untilBetter(r); got != tc.want {
				t.Fatalf("untilBetter = %s, want %s", got, tc.want)
			}
			if got := c.better(r); got != (tc.want <= 0) {
				t.Fatalf("better = %v, while untilBetter is %s", got, tc.want)
			}
		})
	}
}
