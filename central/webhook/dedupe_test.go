package webhook

import (
	"testing"
	"time"
)

// TestSeenEventsFullKeepsDuplicates: a full SeenEvents forgets its oldest id
// only to make room for a new one. A redelivery of an id it still holds is a
// duplicate, and must neither be reported as first nor evict another id.
func TestSeenEventsFullKeepsDuplicates(t *testing.T) {
	t0 := time.Unix(0, 0)
	cases := []struct {
		name  string
		again string
	}{
		{"oldest id again", "a"},
		{"newest id again", "b"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := NewSeenEvents(2, time.Hour)
			if !s.First("a", t0) || !s.First("b", t0.Add(time.Second)) {
				t.Fatal("a b")
			}
			if s.First(c.again, t0.Add(time.Minute)) {
				t.Fatalf("%s redelivered while held: reported as first", c.again)
			}
			// Both ids are still held: neither was evicted by the duplicate.
			if s.First("a", t0.Add(2*time.Minute)) || s.First("b", t0.Add(2*time.Minute)) {
				t.Fatal("an id was forgotten by a duplicate's lookup")
			}
		})
	}
}
