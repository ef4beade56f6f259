package ship

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/sync/wire"
)

// Central's answer may count entries older than its retention (pruned,
// pruned_gaps) on top of accepted and duplicates: the shipper takes it as
// central's answer, deletes the batch and still refuses answers that do
// not account for every event.
func TestBatchResultWithPrunedCounts(t *testing.T) {
	full, err := json.Marshal(wire.BatchResult{Duplicates: 3, Pruned: 3, PrunedGaps: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		resp string
		ok   bool
	}{
		{"all pruned", string(full), true},
		{"some pruned", `{"accepted":1,"duplicates":2,"gaps":0,"pruned":1}`, true},
		{"pruned outside the duplicates", `{"accepted":0,"duplicates":0,"gaps":0,"pruned":3}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkBatchResult([]byte(tc.resp), 3, 1)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrNotBatchResult)) {
				t.Fatalf("%s: %v", tc.resp, err)
			}
		})
	}
}

// Retry-After is honoured up to an hour, whatever number a proxy in front
// of central puts in it: seconds past the range of a Duration (or of an
// integer) are the cap, not an overflow into no wait at all.
func TestRetryAfterIsCappedNotOverflowed(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  time.Duration
	}{
		{"120", 2 * time.Minute},
		{"3600", time.Hour},
		{"86400", time.Hour},
		{"9223372037", time.Hour},            // just past a Duration's seconds
		{"18446744073", time.Hour},           // wraps to zero
		{"99999999999999999", time.Hour},     // wraps
		{"999999999999999999999", time.Hour}, // past an integer
	} {
		d, ok := retryAfter(http.Header{"Retry-After": {tc.value}}, time.Now())
		if !ok || d != tc.want {
			t.Errorf("Retry-After %s: got %v (%v), want %v", tc.value, d, ok, tc.want)
		}
	}
}
