package lease

import (
	"reflect"
	"testing"
)

// TestPlaceholderColumns: each ? of a Set is typed by the column whose
// whole value (or COALESCE fallback) it is; any other ? names no column,
// so its steps are written by Move.
func TestPlaceholderColumns(t *testing.T) {
	tests := []struct {
		set  string
		want []string
	}{
		{"", nil},
		{"note = ?", []string{"note"}},
		{"t.note = ?", []string{"note"}},
		{"finished_at = ?, result_ref = ?, started_at = updated_at, worker_id = NULL", []string{"finished_at", "result_ref"}},
		{"delivered_at = ?, last_status_code = ?, last_error = NULL, worker_id = NULL, lease_expires_at = NULL", []string{"delivered_at", "last_status_code"}},
		{"next_attempt_at = ?, attempt_count = attempt_count - 1, worker_id = NULL", []string{"next_attempt_at"}},
		{"started_at = COALESCE(started_at, ?), note = ?", []string{"started_at", "note"}},
		{"started_at = coalesce( started_at ,? )", []string{"started_at"}},
		{"started_at = COALESCE(finished_at, ?)", []string{""}},
		{"n = n + ?, note = ?", []string{"", "note"}},
		{"n = GREATEST(?, ?)", []string{"", ""}},
		{"note = 'a, b = ?', n = ?", []string{"n"}},
		{"note = ? -- a comment, n = ?", []string{""}},
	}
	for _, tc := range tests {
		if got := placeholderColumns(tc.set); !reflect.DeepEqual(got, tc.want) && (len(got) != 0 || len(tc.want) != 0) {
			t.Errorf("placeholderColumns(%q) = %q, want %q", tc.set, got, tc.want)
		}
	}
}
