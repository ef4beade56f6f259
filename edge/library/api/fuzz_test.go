package api_test

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzDeleteBody: POST …/duplicates/groups/{key}/delete with any body is
// answered below 500 and never panics, on a library holding a real
// duplicate group (three copies of one file) whose ids the seeds name.
func FuzzDeleteBody(f *testing.F) {
	s := start(f)
	for i := 0; i < 3; i++ {
		if err := os.WriteFile(filepath.Join(s.root, string(rune('a'+i))+".bin"), []byte("same bytes"), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	s.run()
	_, job := s.do("POST", "/api/v1/scans", "")
	s.waitJob(job["id"].(float64))
	key := "blake3:" + strings.Repeat("a", 64)
	for range 500 {
		if _, page := s.do("GET", "/api/v1/duplicates/groups", ""); page != nil {
			if items, _ := page["items"].([]any); len(items) == 1 {
				key = items[0].(map[string]any)["group_key"].(string)
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, seed := range []string{`{"keep_file_ids":[1],"delete_file_ids":[2]}`, `{"keep_file_ids":[1,2],"delete_file_ids":[3],"reason":"x"}`,
		`{"keep_file_ids":[],"delete_file_ids":[1]}`, `{"keep_file_ids":[1],"delete_file_ids":[1]}`, `{}`, `[]`, `{"keep_file_ids":[-1]}`, "\xff"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		res, err := http.Post(s.base+"/api/v1/duplicates/groups/"+key+"/delete", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode >= 500 {
			t.Fatalf("body %q answered %d: %s", body, res.StatusCode, raw)
		}
	})
}
