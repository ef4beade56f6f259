package api_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// nested is metadata {"a": …} with its value depth-1 arrays deep, so the
// metadata object nests depth levels in all.
func nested(depth int) string {
	return `{"a":` + strings.Repeat("[", depth-1) + "0" + strings.Repeat("]", depth-1) + `}`
}

// TestMetadataDepth: metadata nests at most 32 levels (the metadata object
// counting as one); deeper is 400 invalid_request naming metadata, nothing
// stored, on both engines — whatever the depth, quickly and never a 500
// (Postgres's jsonb parser and encoding/json recurse once per level).
func TestMetadataDepth(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		e := start(t, db)
		key := e.requester()
		body := func(depth int) string {
			return strings.Replace(js(withMetadata(validBody(), map[string]any{"t": "MARK"})), `{"t":"MARK"}`, nested(depth), 1)
		}
		// Brackets inside strings, after an escaped quote too, are text.
		brackets := strings.Replace(js(withMetadata(validBody(), map[string]any{"t": "MARK"})), `"MARK"`,
			`"\\\"`+strings.Repeat("[", 100)+`","[{":"{{{{"`, 1)
		for i, tc := range []struct {
			depth  int
			status int
			body   string
		}{{1, 202, ""}, {32, 202, ""}, {0, 202, brackets}, {33, 400, ""}, {64, 400, ""}, {1000, 400, ""}, {8000, 400, ""}} {
			if tc.body == "" {
				tc.body = body(tc.depth)
			}
			began := time.Now()
			r := e.do("POST", "/transcode", key, fmt.Sprintf("depth-%d", i), tc.body)
			took := time.Since(began)
			errBody, _ := r.Body["error"].(map[string]any)
			msg, _ := errBody["message"].(string)
			if r.Code != tc.status || tc.status == 400 && !strings.HasPrefix(msg, "metadata ") {
				t.Errorf("depth %d: %d %.200s, want %d", tc.depth, r.Code, r.Raw, tc.status)
			}
			if took > 2*time.Second {
				t.Errorf("depth %d took %v", tc.depth, took)
			}
		}
		if n := count(t, db, `SELECT COUNT(*) FROM inbox_jobs`); n != 3 {
			t.Fatalf("%d jobs stored, want the 3 within the limit", n)
		}
	})
}

// TestMetadataNumbersStorable: a metadata number Postgres's numeric cannot
// hold — more than 16383 digits after the decimal point once its exponent
// is applied (1e-16384, 0e-16384, a long fraction times 1e-384) — or with an
// exponent beyond ±1000 (older Postgres releases refuse those), or outside
// float64's range, is 400 invalid_request naming metadata on both engines.
// Before, Postgres answered the insert with an error: a 500, while SQLite
// stored the job. Numbers within the limits are stored.
func TestMetadataNumbersStorable(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		e := start(t, db)
		key := e.requester()
		cases := []struct {
			num    string
			status int
		}{
			{"1e-16384", 400},
			{"0e-16384", 400},
			{"1." + strings.Repeat("1", 16000) + "e-384", 400},
			{"1e-1001", 400},
			{"0.1e1001", 400},
			{"1e400", 400},
			{"-1" + strings.Repeat("0", 400), 400},
			{"1e-1000", 202},
			{"1." + strings.Repeat("1", 15000) + "e-300", 202},
			{"12345678901234567890123", 202},
			{"-0", 202},
			{"1E+2", 202},
			{"1e308", 202},
		}
		accepted := 0
		for i, tc := range cases {
			body := strings.Replace(js(withMetadata(validBody(), map[string]any{"t": "MARK"})), `"MARK"`, tc.num, 1)
			r := e.do("POST", "/transcode", key, fmt.Sprintf("num-%d", i), body)
			errBody, _ := r.Body["error"].(map[string]any)
			msg, _ := errBody["message"].(string)
			if r.Code != tc.status || tc.status == 400 && !strings.HasPrefix(msg, "metadata ") {
				t.Errorf("%.24s: %d %.200s, want %d", tc.num, r.Code, r.Raw, tc.status)
			}
			if r.Code == 202 {
				accepted++
			}
		}
		if n := count(t, db, `SELECT COUNT(*) FROM inbox_jobs`); n != accepted {
			t.Fatalf("%d jobs stored, %d accepted", n, accepted)
		}
	})
}
