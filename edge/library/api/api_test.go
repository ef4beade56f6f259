package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/library"
)

type server struct {
	t    testing.TB
	base string
	lib  *library.Library
	root string
}

func start(t testing.TB) *server {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "lib")
	os.MkdirAll(root, 0o755)
	s := library.Defaults()
	s.Roots = root
	s.Watch = false
	s.Poll = 10 * time.Millisecond
	s.PolicyInterval = 20 * time.Millisecond
	s.IOBytesPerSec = 0
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	lib, err := library.New(context.Background(), log, filepath.Join(dir, "state"), "api-test", s)
	if err != nil {
		t.Fatal(err)
	}
	e := daemon.NewEcho(log)
	lib.Mount(e)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: e}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return &server{t: t, base: "http://" + ln.Addr().String(), lib: lib, root: root}
}

// scanOneGIF puts one GIF in the library's root, runs the library and a
// scan to completion, and returns the file's id.
func (s *server) scanOneGIF() int64 {
	s.t.Helper()
	os.WriteFile(filepath.Join(s.root, "a.gif"), gifBytes(), 0o644)
	s.run()
	_, job := s.do("POST", "/api/v1/scans", "")
	if j := s.waitJob(job["id"].(float64)); j["status"] != "completed" {
		s.t.Fatalf("scan %v", j)
	}
	var id int64
	s.lib.Store.DB.QueryRow(`SELECT id FROM library_files`).Scan(&id)
	return id
}

func (s *server) do(method, path, body string) (int, map[string]any) {
	s.t.Helper()
	req, _ := http.NewRequest(method, s.base+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	json.Unmarshal(b, &out)
	return resp.StatusCode, out
}

// run starts the library's loops until the test ends.
func (s *server) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.lib.Run(ctx); close(done) }()
	s.t.Cleanup(func() { cancel(); <-done; s.lib.Store.Close() })
}

func (s *server) waitJob(id float64) map[string]any {
	s.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		_, j := s.do("GET", fmt.Sprintf("/api/v1/jobs/%d", int64(id)), "")
		if st := j["status"]; st != "pending" && st != "running" {
			return j
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("job %v did not finish", id)
	return nil
}

func TestScanConflictAndJobs(t *testing.T) {
	s := start(t)
	var wg sync.WaitGroup
	codes := make(chan int, 10)
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); c, _ := s.do("POST", "/api/v1/scans", ""); codes <- c }()
	}
	wg.Wait()
	close(codes)
	n202, n409 := 0, 0
	for c := range codes {
		switch c {
		case 202:
			n202++
		case 409:
			n409++
		}
	}
	if n202 != 1 || n409 != 9 {
		t.Fatalf("202=%d 409=%d", n202, n409)
	}
	code, page := s.do("GET", "/api/v1/jobs?limit=1", "")
	if code != 200 || len(page["items"].([]any)) != 1 {
		t.Fatalf("jobs %d %v", code, page)
	}
	for _, c := range []struct {
		path string
		code int
	}{
		{"/api/v1/jobs/99999", 404},
		{"/api/v1/jobs/abc", 404},
		{"/api/v1/jobs?cursor=abc", 400},
		{"/api/v1/jobs?cursor=424242", 400},
		{"/api/v1/jobs?limit=0", 400},
		{"/api/v1/duplicates/groups?cursor=%21%21", 400},
		{"/api/v1/duplicates/groups/md5:abcd/files", 400},
		{"/api/v1/duplicates/groups/blake3:abcd/files", 400},
		{"/api/v1/duplicates/groups/blake3:" + strings.Repeat("a", 64) + "/files", 404},
		{"/api/v1/files/12345/thumbnail", 404},
	} {
		if got, body := s.do("GET", c.path, ""); got != c.code {
			t.Errorf("GET %s = %d %v, want %d", c.path, got, body, c.code)
		} else if got == 400 {
			msg := body["error"].(map[string]any)["message"].(string)
			if msg == "" {
				t.Errorf("GET %s: empty message", c.path)
			}
		}
	}
	if code, body := s.do("POST", "/api/v1/maintenance/wal", `{"mode":"full"}`); code != 400 || !strings.Contains(fmt.Sprint(body), "mode") {
		t.Fatalf("bad mode: %d %v", code, body)
	}
	if code, _ := s.do("POST", "/api/v1/maintenance/wal", `{"mode":"passive"}`); code != 202 {
		t.Fatalf("wal: %d", code)
	}
}

func TestDuplicatesDeleteAndThumbnailFlow(t *testing.T) {
	s := start(t)
	for _, n := range []string{"a", "b", "c"} {
		os.WriteFile(filepath.Join(s.root, n+".gif"), gifBytes(), 0o644)
	}
	s.run()
	_, job := s.do("POST", "/api/v1/scans", "")
	if j := s.waitJob(job["id"].(float64)); j["status"] != "completed" {
		t.Fatalf("scan %v", j)
	}
	// The automatic hash follows the scan; a group shows up as soon as two
	// copies are hashed, so wait until all three are in it.
	var groups []any
	complete := func() bool {
		return len(groups) == 1 && groups[0].(map[string]any)["file_count"] == float64(3)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !complete() && time.Now().Before(deadline) {
		_, page := s.do("GET", "/api/v1/duplicates/groups", "")
		groups, _ = page["items"].([]any)
		time.Sleep(20 * time.Millisecond)
	}
	if len(groups) != 1 {
		t.Fatalf("groups %v", groups)
	}
	g := groups[0].(map[string]any)
	key := g["group_key"].(string)
	_, files := s.do("GET", "/api/v1/duplicates/groups/"+key+"/files?limit=2", "")
	items := files["items"].([]any)
	if len(items) != 2 || files["next_cursor"] == nil {
		t.Fatalf("files page %v", files)
	}
	_, rest := s.do("GET", "/api/v1/duplicates/groups/"+key+"/files?limit=2&cursor="+files["next_cursor"].(string), "")
	if len(rest["items"].([]any)) != 1 {
		t.Fatalf("second page %v", rest)
	}
	id := func(i int) int64 { return int64(items[i].(map[string]any)["id"].(float64)) }

	// Thumbnail: 202 with a queued job, then the image.
	path := fmt.Sprintf("/api/v1/files/%d/thumbnail", id(0))
	code, th := s.do("GET", path, "")
	if code != 202 || th["status"] == nil {
		t.Fatalf("thumbnail first call %d %v", code, th)
	}
	deadline = time.Now().Add(10 * time.Second)
	for code != 200 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		code, _ = s.do("GET", path, "")
	}
	if code != 200 {
		t.Fatalf("thumbnail never ready: %d", code)
	}

	for _, c := range []struct {
		body string
		code int
	}{
		{`{"keep_file_ids":[],"delete_file_ids":[1]}`, 400},
		{fmt.Sprintf(`{"keep_file_ids":[%d],"delete_file_ids":[%d]}`, id(0), id(0)), 400},
		{fmt.Sprintf(`{"keep_file_ids":[%d],"delete_file_ids":[99999]}`, id(0)), 404},
		{`{"keep":[1]}`, 400},
	} {
		if got, body := s.do("POST", "/api/v1/duplicates/groups/"+key+"/delete", c.body); got != c.code {
			t.Errorf("delete %s = %d %v, want %d", c.body, got, body, c.code)
		}
	}
	code, del := s.do("POST", "/api/v1/duplicates/groups/"+key+"/delete", fmt.Sprintf(`{"keep_file_ids":[%d],"delete_file_ids":[%d]}`, id(0), id(1)))
	if code != 202 {
		t.Fatalf("delete %d %v", code, del)
	}
	j := s.waitJob(del["id"].(float64))
	if j["status"] != "completed" || len(j["decisions"].([]any)) != 2 {
		t.Fatalf("delete job %v", j)
	}
}

// gifBytes is a 1x1 GIF.
func gifBytes() []byte {
	return []byte("GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00,\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;")
}

// TestMalformedGroupKeyAndCursor: a group_key that is not
// <blake3|sha256>:<hex of the right length> on POST …/delete, and a cursor
// that is not a positive integer id on GET …/files, are 400s naming the
// problem; nothing is enqueued.
func TestMalformedGroupKeyAndCursor(t *testing.T) {
	s := start(t)
	valid := "blake3:" + strings.Repeat("ab", 32)
	body := `{"keep_file_ids":[1],"delete_file_ids":[2]}`
	cases := []struct {
		name, method, path, body, code string
	}{
		{"delete: no separator", "POST", "/api/v1/duplicates/groups/nonsense/delete", body, "bad_group_key"},
		{"delete: unknown algorithm", "POST", "/api/v1/duplicates/groups/md5:" + strings.Repeat("ab", 16) + "/delete", body, "bad_group_key"},
		{"delete: short digest", "POST", "/api/v1/duplicates/groups/blake3:abc/delete", body, "bad_group_key"},
		{"delete: non-hex digest", "POST", "/api/v1/duplicates/groups/sha256:" + strings.Repeat("zz", 32) + "/delete", body, "bad_group_key"},
		{"files: garbled cursor", "GET", "/api/v1/duplicates/groups/" + valid + "/files?cursor=abc", "", "bad_cursor"},
		{"files: zero cursor", "GET", "/api/v1/duplicates/groups/" + valid + "/files?cursor=0", "", "bad_cursor"},
		{"files: negative cursor", "GET", "/api/v1/duplicates/groups/" + valid + "/files?cursor=-5", "", "bad_cursor"},
		{"files: overflowing cursor", "GET", "/api/v1/duplicates/groups/" + valid + "/files?cursor=99999999999999999999", "", "bad_cursor"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out := s.do(c.method, c.path, c.body)
			e, _ := out["error"].(map[string]any)
			if code != 400 || e == nil || e["code"] != c.code || e["message"] == "" {
				t.Fatalf("%s %s = %d %v, want 400 %s", c.method, c.path, code, out, c.code)
			}
		})
	}
	var jobs int
	s.lib.Store.DB.QueryRow(`SELECT COUNT(*) FROM jobs`).Scan(&jobs)
	if jobs != 0 {
		t.Fatalf("%d jobs enqueued by refused requests", jobs)
	}
}

// TestThumbnailRerenderedWhenCacheFileGone: a ready thumbnail whose cache
// file was removed (a cleared cache) is queued again (202) and then served
// (200), instead of answering 404 forever.
func TestThumbnailRerenderedWhenCacheFileGone(t *testing.T) {
	s := start(t)
	path := fmt.Sprintf("/api/v1/files/%d/thumbnail", s.scanOneGIF())
	waitReady := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		code, _ := s.do("GET", path, "")
		for code != 200 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			code, _ = s.do("GET", path, "")
		}
		if code != 200 {
			t.Fatalf("thumbnail never ready: %d", code)
		}
	}
	waitReady()
	var out string
	var firstID int64
	s.lib.Store.DB.QueryRow(`SELECT id, output_path FROM thumbnails WHERE status = 'ready'`).Scan(&firstID, &out)
	if err := os.Remove(out); err != nil {
		t.Fatal(err)
	}
	code, th := s.do("GET", path, "")
	if code != 202 || (th["status"] != "pending" && th["status"] != "running") {
		t.Fatalf("after the cache file was removed: %d %v, want 202 and a queued thumbnail", code, th)
	}
	waitReady()
	if _, err := os.Stat(out); err != nil {
		t.Fatalf("cache file not rendered again: %v", err)
	}
	var rows int
	s.lib.Store.DB.QueryRow(`SELECT COUNT(*) FROM thumbnails`).Scan(&rows)
	if rows != 1 {
		t.Fatalf("%d thumbnail rows, want the one re-rendered row", rows)
	}
}

// TestStrictRequests: a JSON body with anything after the object, a body
// that is not an object, a query string that does not parse, a repeated
// parameter and a group cursor whose values are out of the sort key's range
// are 400s; nothing is enqueued.
func TestStrictRequests(t *testing.T) {
	s := start(t)
	valid := "blake3:" + strings.Repeat("ab", 32)
	hugeCursor := func(count, size int64) string {
		b, _ := json.Marshal(map[string]any{"file_count": count, "total_size_bytes": size, "hash_algorithm": "blake3",
			"content_hash_hex": strings.Repeat("ab", 32)})
		return base64.RawURLEncoding.EncodeToString(b)
	}
	del := "/api/v1/duplicates/groups/" + valid + "/delete"
	cases := []struct {
		name, method, path, body, code string
	}{
		{"delete: trailing text", "POST", del, `{"keep_file_ids":[1],"delete_file_ids":[2]} and more`, "bad_request"},
		{"delete: a second object", "POST", del, `{"keep_file_ids":[1],"delete_file_ids":[2]}{"permanent":true}`, "bad_request"},
		{"delete: null", "POST", del, `null`, "bad_request"},
		{"delete: array", "POST", del, `[1,2]`, "bad_request"},
		{"wal: trailing text", "POST", "/api/v1/maintenance/wal", `{"mode":"passive"} x`, "bad_request"},
		{"jobs: malformed query", "GET", "/api/v1/jobs?cursor=%%%", "", "bad_query"},
		{"groups: malformed query", "GET", "/api/v1/duplicates/groups?cursor=%%%", "", "bad_query"},
		{"files: malformed query", "GET", "/api/v1/duplicates/groups/" + valid + "/files?limit=%zz", "", "bad_query"},
		{"thumbnail: malformed query", "GET", "/api/v1/files/1/thumbnail?x=%", "", "bad_query"},
		{"jobs: repeated cursor", "GET", "/api/v1/jobs?cursor=5&cursor=7", "", "bad_query"},
		{"groups: repeated limit", "GET", "/api/v1/duplicates/groups?limit=5&limit=7", "", "bad_query"},
		{"groups: total_size_bytes beyond the sort key", "GET", "/api/v1/duplicates/groups?cursor=" + hugeCursor(2, math.MaxInt64), "", "bad_cursor"},
		{"groups: file_count beyond the sort key", "GET", "/api/v1/duplicates/groups?cursor=" + hugeCursor(math.MaxInt64, 10), "", "bad_cursor"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out := s.do(c.method, c.path, c.body)
			e, _ := out["error"].(map[string]any)
			if code != 400 || e == nil || e["code"] != c.code || e["message"] == "" {
				t.Fatalf("%s %s = %d %v, want 400 %s", c.method, c.path, code, out, c.code)
			}
		})
	}
	var jobs, wal int
	s.lib.Store.DB.QueryRow(`SELECT COUNT(*) FROM jobs`).Scan(&jobs)
	s.lib.Store.DB.QueryRow(`SELECT COUNT(*) FROM wal_maintenance_jobs`).Scan(&wal)
	if jobs != 0 || wal != 0 {
		t.Fatalf("%d jobs and %d WAL rows enqueued by refused requests", jobs, wal)
	}
	// The same requests without the defect are answered normally.
	if code, out := s.do("POST", "/api/v1/maintenance/wal", " {\"mode\":\"passive\"}\n "); code != 202 {
		t.Fatalf("valid WAL request: %d %v", code, out)
	}
	if code, out := s.do("GET", "/api/v1/jobs?limit=5&x=%20ok", ""); code != 200 {
		t.Fatalf("valid query: %d %v", code, out)
	}
}

// TestGroupFilesOnlyOfDuplicateGroups: §6.2 makes a duplicate group of
// more than one file, and GET …/groups never lists a digest held by one
// file; its files route answers 404 for such a digest as for an unknown
// one (and as a delete request in it does), on every page, and a group that
// shrank to one file is gone.
func TestGroupFilesOnlyOfDuplicateGroups(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	write := func(name, content string) string {
		p := filepath.Join(s.root, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	scanAndHash := func() {
		t.Helper()
		if _, err := s.lib.Policy.EnqueueScan(ctx); err != nil {
			t.Fatal(err)
		}
		if did, err := s.lib.Executor.RunJobOnce(ctx); !did || err != nil {
			t.Fatalf("scan did=%v err=%v", did, err)
		}
		if _, err := s.lib.Policy.EnqueueHash(ctx); err != nil {
			t.Fatal(err)
		}
		if did, err := s.lib.Executor.RunJobOnce(ctx); !did || err != nil {
			t.Fatalf("hash did=%v err=%v", did, err)
		}
	}
	keyOf := func(path string) string {
		t.Helper()
		var k string
		if err := s.lib.Store.DB.QueryRow(`SELECT hash_algorithm || ':' || content_hash FROM library_files WHERE path = ?`, path).Scan(&k); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return k
	}
	pair := write("pair-a.bin", "two copies")
	write("pair-b.bin", "two copies")
	single := write("single.bin", "one copy")
	shrunk := write("shrunk-a.bin", "two copies, then one")
	shrunkB := write("shrunk-b.bin", "two copies, then one")
	scanAndHash()
	if code, _ := s.do("GET", "/api/v1/duplicates/groups/"+keyOf(shrunk)+"/files", ""); code != 200 {
		t.Fatalf("group of two before the removal: %d", code)
	}
	os.Remove(shrunkB)
	scanAndHash()

	files := func(key, query string) string { return "/api/v1/duplicates/groups/" + key + "/files" + query }
	cases := []struct {
		name  string
		path  string
		code  int
		items int
	}{
		{"two copies", files(keyOf(pair), ""), 200, 2},
		{"two copies, first page of one", files(keyOf(pair), "?limit=1"), 200, 1},
		{"one file", files(keyOf(single), ""), 404, 0},
		{"one file, after a cursor", files(keyOf(single), "?cursor=1"), 404, 0},
		{"one file, page of one", files(keyOf(single), "?limit=1"), 404, 0},
		{"a group that shrank to one file", files(keyOf(shrunk), ""), 404, 0},
		{"unknown digest", files("blake3:"+strings.Repeat("b", 64), ""), 404, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := s.do("GET", c.path, "")
			if code != c.code {
				t.Fatalf("GET %s = %d %v, want %d", c.path, code, body, c.code)
			}
			if code == 404 {
				if e, _ := body["error"].(map[string]any); e == nil || e["code"] != "not_found" {
					t.Fatalf("GET %s: body %v, want error not_found", c.path, body)
				}
				return
			}
			if items, _ := body["items"].([]any); len(items) != c.items {
				t.Fatalf("GET %s: %d items, want %d", c.path, len(items), c.items)
			}
		})
	}
	_, groups := s.do("GET", "/api/v1/duplicates/groups", "")
	if items, _ := groups["items"].([]any); len(items) != 1 || items[0].(map[string]any)["group_key"] != keyOf(pair) {
		t.Fatalf("groups listed %v, want only the pair", groups)
	}
}
