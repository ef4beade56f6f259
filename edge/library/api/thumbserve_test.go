package api_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestThumbnailAnswers: a ready row is served only from the thumbnail
// cache — one naming a file elsewhere (the database edited by hand) is a
// 500 that serves none of that file — and a failed thumbnail whose
// attempts are spent is 422, not a 503 promising a retry that never comes.
func TestThumbnailAnswers(t *testing.T) {
	cases := []struct {
		name string
		// edit changes the ready row (or what it names) and returns
		// bytes the answer must not hold.
		edit     func(t *testing.T, s *server, id int64) string
		wantCode int
		wantErr  string
	}{
		{"ready row naming a file outside the cache", func(t *testing.T, s *server, id int64) string {
			secret := filepath.Join(t.TempDir(), "secret")
			if err := os.WriteFile(secret, []byte("not a thumbnail"), 0o644); err != nil {
				t.Fatal(err)
			}
			mustExec(t, s, `UPDATE thumbnails SET output_path = ? WHERE id = ?`, secret, id)
			return "not a thumbnail"
		}, http.StatusInternalServerError, `"internal"`},
		{"failed with its attempts spent", func(t *testing.T, s *server, id int64) string {
			mustExec(t, s, `UPDATE thumbnails SET status = 'failed', error_code = 'render_failed', error_message = 'x',
				error_count = ?, retry_after = NULL WHERE id = ?`, s.lib.Policy.ThumbMaxAttempts, id)
			return ""
		}, http.StatusUnprocessableEntity, `"thumbnail_failed"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := start(t)
			path := s.base + fmt.Sprintf("/api/v1/files/%d/thumbnail", s.scanOneGIF())
			deadline := time.Now().Add(10 * time.Second)
			for code, _ := get(t, path); code != 200; code, _ = get(t, path) {
				if time.Now().After(deadline) {
					t.Fatalf("thumbnail never ready: %d", code)
				}
				time.Sleep(20 * time.Millisecond)
			}
			var id int64
			s.lib.Store.DB.QueryRow(`SELECT id FROM thumbnails WHERE status = 'ready'`).Scan(&id)
			forbidden := c.edit(t, s, id)
			code, body := get(t, path)
			if code != c.wantCode || !strings.Contains(body, c.wantErr) {
				t.Fatalf("answer %d %s, want %d with %s", code, body, c.wantCode, c.wantErr)
			}
			if forbidden != "" && strings.Contains(body, forbidden) {
				t.Fatalf("answer holds the file the row named: %s", body)
			}
		})
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func mustExec(t *testing.T, s *server, q string, args ...any) {
	t.Helper()
	if _, err := s.lib.Store.DB.Exec(q, args...); err != nil {
		t.Fatal(err)
	}
}
