package api_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"testing"
)

// walk follows next_cursor from path until it is absent and returns every
// item and every cursor it was given.
func (s *server) walk(path string) (items []map[string]any, cursors []string) {
	s.t.Helper()
	next := ""
	for pages := 0; ; pages++ {
		if pages > 100 {
			s.t.Fatalf("%s: no end after 100 pages", path)
		}
		q := path
		if next != "" {
			q += "&cursor=" + url.QueryEscape(next)
		}
		code, page := s.do("GET", q, "")
		if code != 200 {
			s.t.Fatalf("GET %s = %d %v", q, code, page)
		}
		for _, it := range page["items"].([]any) {
			items = append(items, it.(map[string]any))
		}
		c, ok := page["next_cursor"].(string)
		if !ok {
			return items, cursors
		}
		cursors = append(cursors, c)
		next = c
	}
}

// TestPaginationCursorsOverHTTP checks the §6.1 and §6.2 cursors as a
// client sees them: jobs page by created_at DESC, id DESC with the tail id
// (a decimal string) as the cursor, through timestamps shared by many rows;
// groups page in the §6.2 order with a base64url JSON cursor holding
// exactly the tail group's file_count, total_size_bytes, hash_algorithm and
// content_hash_hex; neither repeats nor skips a row.
func TestPaginationCursorsOverHTTP(t *testing.T) {
	s := start(t)
	db := s.lib.Store.DB
	for i := 0; i < 23; i++ {
		// three timestamps, each shared by several jobs, inserted out of order
		if _, err := db.Exec(`INSERT INTO jobs(kind, status, created_at, updated_at) VALUES ('delete', 'completed', ?, 0)`, 1000+(i*7)%3); err != nil {
			t.Fatal(err)
		}
	}
	jobs, cursors := s.walk("/api/v1/jobs?limit=4")
	if len(jobs) != 23 {
		t.Fatalf("%d jobs paged, want 23", len(jobs))
	}
	for i := 1; i < len(jobs); i++ {
		a, b := jobs[i-1], jobs[i]
		ca, cb := a["created_at"].(float64), b["created_at"].(float64)
		if cb > ca || cb == ca && b["id"].(float64) >= a["id"].(float64) {
			t.Fatalf("jobs %v then %v break created_at DESC, id DESC", a["id"], b["id"])
		}
	}
	for i, c := range cursors {
		tail := jobs[(i+1)*4-1]["id"].(float64)
		if n, err := strconv.ParseInt(c, 10, 64); err != nil || float64(n) != tail {
			t.Fatalf("job cursor %q after page %d, want the tail id %v", c, i+1, tail)
		}
	}

	// Groups: ties on file_count and on total size, both algorithms.
	id := 0
	for g := 0; g < 11; g++ {
		algo := []string{"blake3", "sha256"}[g%2]
		sum := sha256.Sum256([]byte(fmt.Sprint(g)))
		for c := 0; c < 2+g%2; c++ {
			id++
			if _, err := db.Exec(`INSERT INTO library_files(root, path, size_bytes, is_missing, needs_hash, hash_algorithm, content_hash)
VALUES (?, ?, ?, 0, 0, ?, ?)`, s.root, fmt.Sprintf("%s/f%d", s.root, id), 10*(g%3), algo, hex.EncodeToString(sum[:])); err != nil {
				t.Fatal(err)
			}
		}
	}
	groups, cursors := s.walk("/api/v1/duplicates/groups?limit=3")
	if len(groups) != 11 {
		t.Fatalf("%d groups paged, want 11", len(groups))
	}
	key := func(g map[string]any) []any {
		return []any{-g["file_count"].(float64), -g["total_size_bytes"].(float64), g["hash_algorithm"].(string), g["content_hash_hex"].(string)}
	}
	less := func(a, b []any) bool {
		for i := range a {
			switch x := a[i].(type) {
			case float64:
				if y := b[i].(float64); x != y {
					return x < y
				}
			case string:
				if y := b[i].(string); x != y {
					return x < y
				}
			}
		}
		return false
	}
	for i := 1; i < len(groups); i++ {
		if !less(key(groups[i-1]), key(groups[i])) {
			t.Fatalf("group %v then %v break the §6.2 order", groups[i-1]["group_key"], groups[i]["group_key"])
		}
	}
	for i, c := range cursors {
		raw, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil {
			t.Fatalf("group cursor %q is not base64url: %v", c, err)
		}
		var payload map[string]any
		if err := json.Unmarshal(raw, &payload); err != nil {
			t.Fatalf("group cursor %s is not a JSON object: %v", raw, err)
		}
		fields := make([]string, 0, len(payload))
		for f := range payload {
			fields = append(fields, f)
		}
		slices.Sort(fields)
		if want := []string{"content_hash_hex", "file_count", "hash_algorithm", "total_size_bytes"}; !slices.Equal(fields, want) {
			t.Fatalf("group cursor fields %v, want %v", fields, want)
		}
		tail := groups[(i+1)*3-1]
		for _, f := range fields {
			if payload[f] != tail[f] {
				t.Fatalf("group cursor %s = %v, tail group has %v", f, payload[f], tail[f])
			}
		}
		if tail["group_key"] != tail["hash_algorithm"].(string)+":"+tail["content_hash_hex"].(string) {
			t.Fatalf("group_key %v", tail["group_key"])
		}
	}
}
