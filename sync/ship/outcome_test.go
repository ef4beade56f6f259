package ship

import (
	"encoding/json"
	"errors"
	"testing"

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
