package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/edge/library/policy"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

func TestEnqueueSingleActiveScanHash(t *testing.T) {
	type row struct{ kind, status string }
	cases := []struct {
		name     string
		existing []row
		enqueue  string // scan or hash
		active   bool   // want ErrActive (the API answers 409 scan_active)
	}{
		{"empty queue admits a scan", nil, store.KindScan, false},
		{"empty queue admits a hash", nil, store.KindHash, false},
		{"pending scan refuses a second scan", []row{{"scan", "pending"}}, store.KindScan, true},
		{"running scan refuses a second scan", []row{{"scan", "running"}}, store.KindScan, true},
		{"pending scan refuses a hash", []row{{"scan", "pending"}}, store.KindHash, true},
		{"running hash refuses a scan", []row{{"hash", "running"}}, store.KindScan, true},
		{"pending hash refuses a second hash", []row{{"hash", "pending"}}, store.KindHash, true},
		{"finished rows do not count", []row{{"scan", "completed"}, {"hash", "failed"}, {"scan", "cancelled"}}, store.KindScan, false},
		{"retryable rows do not hold the slot", []row{{"scan", "retryable"}, {"hash", "retryable"}}, store.KindHash, false},
		{"delete jobs are outside the mutex", []row{{"delete", "pending"}, {"delete", "running"}}, store.KindScan, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			for _, r := range c.existing {
				e.insert("jobs", map[string]any{"kind": r.kind, "status": r.status})
			}
			before := e.count(`SELECT COUNT(*) FROM jobs`)
			enqueue := e.p.EnqueueScan
			if c.enqueue == store.KindHash {
				enqueue = e.p.EnqueueHash
			}
			j, err := enqueue(ctx)
			if c.active {
				if !errors.Is(err, policy.ErrActive) {
					t.Fatalf("err = %v, want ErrActive", err)
				}
				if n := e.count(`SELECT COUNT(*) FROM jobs`); n != before {
					t.Fatalf("refused request still wrote a row (%d -> %d)", before, n)
				}
				if e.wakes.Load() != 0 {
					t.Fatal("refused request woke the executor")
				}
				return
			}
			if err != nil {
				t.Fatalf("enqueue: %v", err)
			}
			if j.Kind != c.enqueue || j.Status != store.StatusPending || j.CreatedAt != t0 {
				t.Fatalf("job %+v", j)
			}
			if c.enqueue == store.KindHash && j.Payload != `{"algorithm":"blake3"}` {
				t.Fatalf("hash payload %s", j.Payload)
			}
			if e.wakes.Load() != 1 {
				t.Fatalf("executor woken %d times, want 1", e.wakes.Load())
			}
			if n := e.count(`SELECT COUNT(*) FROM jobs WHERE kind IN ('scan','hash') AND status IN ('pending','running')`); n != 1 {
				t.Fatalf("%d active scan/hash rows", n)
			}
		})
	}
}

func TestAdmitThumbnail(t *testing.T) {
	type existing struct {
		status     string
		errorCount int64
		retryAfter *int64 // nil = NULL
		cached     bool   // a ready row's cache file exists
		// The row's source stamp matches the file unless other (admitted
		// for another size/mtime/ctime) or unstamped (from before 0012).
		other, unstamped bool
		group            *string // the row's group_key
		outside          bool    // output_path outside the thumbnails directory
	}
	hashA, hashB := strings.Repeat("a", 64), strings.Repeat("b", 64)
	groupA := "blake3:" + hashA
	cases := []struct {
		name     string
		path     string
		missing  bool
		capacity int
		queued   int       // pending/running rows of other files
		ready    int       // ready rows of other files (never count)
		row      *existing // this file's row, if any
		want     string    // resulting status of this file's row
		newRow   bool      // the file's row is replaced by a new one
		wantErr  error
		hashed   bool // the file has a current digest (hashB)
	}{
		{name: "new row admitted", path: "/lib/a.jpg", capacity: 2, want: store.StatusPending},
		{name: "video admitted", path: "/lib/a.mkv", capacity: 2, want: store.StatusPending},
		{name: "ready rows do not use capacity", path: "/lib/a.png", capacity: 2, queued: 1, ready: 5, want: store.StatusPending},
		{name: "full queue refuses a new row", path: "/lib/a.jpg", capacity: 2, queued: 2, wantErr: policy.ErrQueueFull},
		{name: "zero capacity refuses", path: "/lib/a.jpg", capacity: 0, wantErr: policy.ErrQueueFull},
		{name: "non-media refused", path: "/lib/a.txt", capacity: 2, wantErr: policy.ErrUnsupported},
		{name: "missing file is not found", path: "/lib/a.jpg", missing: true, capacity: 2, wantErr: store.ErrNotFound},
		{name: "existing pending returned even when full", path: "/lib/a.jpg", capacity: 1, queued: 0,
			row: &existing{status: "pending"}, want: store.StatusPending},
		{name: "existing ready returned", path: "/lib/a.jpg", capacity: 2, queued: 2,
			row: &existing{status: "ready", cached: true}, want: store.StatusReady},
		{name: "ready without its cache file is queued again", path: "/lib/a.jpg", capacity: 2, queued: 1,
			row: &existing{status: "ready"}, want: store.StatusPending, newRow: true},
		{name: "ready without its cache file and a full queue is refused", path: "/lib/a.jpg", capacity: 2, queued: 2,
			row: &existing{status: "ready"}, wantErr: policy.ErrQueueFull},
		{name: "failed before retry_after stays failed", path: "/lib/a.jpg", capacity: 2,
			row: &existing{status: "failed", errorCount: 1, retryAfter: at(time.Second)}, want: store.StatusFailed},
		{name: "failed at retry_after is requeued", path: "/lib/a.jpg", capacity: 2,
			row: &existing{status: "failed", errorCount: 1, retryAfter: at(0)}, want: store.StatusPending},
		{name: "failed past retry_after is requeued", path: "/lib/a.jpg", capacity: 2,
			row: &existing{status: "failed", errorCount: 2, retryAfter: at(-time.Minute)}, want: store.StatusPending},
		{name: "failed past retry_after but queue full is refused as a full queue", path: "/lib/a.jpg", capacity: 2, queued: 2,
			row: &existing{status: "failed", errorCount: 1, retryAfter: at(-time.Minute)}, wantErr: policy.ErrQueueFull},
		{name: "failed with attempts spent stays failed", path: "/lib/a.jpg", capacity: 2,
			row: &existing{status: "failed", errorCount: 3, retryAfter: at(-time.Minute)}, want: store.StatusFailed},
		{name: "ready for another version of the file is queued again", path: "/lib/a.jpg", capacity: 2, queued: 1,
			row: &existing{status: "ready", cached: true, other: true}, want: store.StatusPending, newRow: true},
		{name: "ready from before source stamps is queued again", path: "/lib/a.jpg", capacity: 2,
			row: &existing{status: "ready", cached: true, unstamped: true}, want: store.StatusPending, newRow: true},
		{name: "ready for another version and a full queue is refused", path: "/lib/a.jpg", capacity: 2, queued: 2,
			row: &existing{status: "ready", cached: true, other: true}, wantErr: policy.ErrQueueFull},
		{name: "ready of another group is queued again", path: "/lib/a.jpg", capacity: 2, hashed: true,
			row: &existing{status: "ready", cached: true, group: &groupA}, want: store.StatusPending, newRow: true},
		{name: "ready admitted before the file was hashed is kept", path: "/lib/a.jpg", capacity: 2, hashed: true,
			row: &existing{status: "ready", cached: true}, want: store.StatusReady},
		{name: "failed for another version is queued again before retry_after", path: "/lib/a.jpg", capacity: 2,
			row: &existing{status: "failed", errorCount: 3, retryAfter: at(time.Hour), other: true}, want: store.StatusPending, newRow: true},
		{name: "pending for another version is left to finish", path: "/lib/a.jpg", capacity: 2,
			row: &existing{status: "pending", other: true}, want: store.StatusPending},
		{name: "replaced row pointing outside the thumbnails directory: that file is left alone", path: "/lib/a.jpg", capacity: 2,
			row: &existing{status: "ready", cached: true, other: true, outside: true}, want: store.StatusPending, newRow: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			e.p.ThumbQueueCapacity = c.capacity
			ctx := context.Background()
			for i := 0; i < c.queued; i++ {
				status := []string{"pending", "running"}[i%2]
				e.insert("thumbnails", map[string]any{"file_id": 100 + i, "status": status, "format": "jpeg", "max_size": 64})
			}
			for i := 0; i < c.ready; i++ {
				e.insert("thumbnails", map[string]any{"file_id": 200 + i, "status": "ready", "format": "jpeg", "max_size": 64})
			}
			f := store.File{ID: 1, Path: c.path, IsMissing: c.missing, SizeBytes: 10, MtimeNS: 5, CtimeNS: ptr(int64(7))}
			if c.hashed {
				f.HashAlgorithm, f.ContentHash = ptr(store.AlgoBLAKE3), &hashB
			}
			var rowID int64
			out := filepath.Join(e.p.ThumbsDir, "1_64.jpg")
			if c.row != nil {
				path := out
				if c.row.outside {
					path = filepath.Join(filepath.Dir(e.p.ThumbsDir), "victim.jpg")
				}
				if c.row.cached {
					os.MkdirAll(e.p.ThumbsDir, 0o750)
					if err := os.WriteFile(path, []byte("jpeg"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				var size, mtime, ctime any = f.SizeBytes, f.MtimeNS, *f.CtimeNS
				switch {
				case c.row.unstamped:
					size, mtime, ctime = nil, nil, nil
				case c.row.other:
					ctime = *f.CtimeNS + 1 // rewritten in place, size and mtime kept
				}
				var group any
				if c.row.group != nil {
					group = *c.row.group
				}
				rowID = e.insert("thumbnails", map[string]any{"file_id": 1, "status": c.row.status, "format": "jpeg",
					"max_size": 64, "error_count": c.row.errorCount, "retry_after": nullable(c.row.retryAfter), "output_path": path,
					"source_size_bytes": size, "source_mtime_ns": mtime, "source_ctime_ns": ctime, "group_key": group})
				t.Cleanup(func() {
					if c.row.outside {
						if _, err := os.Stat(path); err != nil {
							t.Errorf("file outside the thumbnails directory touched: %v", err)
						}
					}
				})
			}
			before := e.count(`SELECT COUNT(*) FROM thumbnails`)
			th, err := e.p.AdmitThumbnail(ctx, f, store.FormatJPEG, 64)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("err = %v, want %v", err, c.wantErr)
				}
				if n := e.count(`SELECT COUNT(*) FROM thumbnails`); n != before {
					t.Fatalf("refused admission wrote a row")
				}
				if c.row != nil && e.count(`SELECT COUNT(*) FROM thumbnails WHERE id = ?`, rowID) != 1 {
					t.Fatalf("refused admission removed the existing row")
				}
				if c.row != nil && c.row.cached {
					if _, err := os.Stat(out); err != nil {
						t.Fatalf("refused admission removed the cache file: %v", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if th.Status != c.want || th.FileID != 1 {
				t.Fatalf("thumbnail %+v, want status %s", th, c.want)
			}
			var stored string
			e.st.DB.QueryRow(`SELECT status FROM thumbnails WHERE id = ?`, th.ID).Scan(&stored)
			if stored != c.want {
				t.Fatalf("stored status %s, want %s", stored, c.want)
			}
			if c.row != nil && !c.newRow && th.ID != rowID {
				t.Fatalf("a second row was admitted for the file (%d, existing %d)", th.ID, rowID)
			}
			if n := e.count(`SELECT COUNT(*) FROM thumbnails WHERE file_id = 1`); n != 1 {
				t.Fatalf("%d rows for the file", n)
			}
			if c.newRow {
				// The new row records what it is made for; the old picture is gone.
				if th.ID == rowID || th.SourceSize == nil || *th.SourceSize != f.SizeBytes || th.SourceCtime == nil ||
					*th.SourceCtime != *f.CtimeNS || th.ErrorCount != 0 {
					t.Fatalf("replacement row %+v", th)
				}
				if _, err := os.Stat(out); !os.IsNotExist(err) {
					t.Fatalf("stale cache file left: %v", err)
				}
			}
			if q := e.count(`SELECT COUNT(*) FROM thumbnails WHERE status IN ('pending','running')`); q > max(c.capacity, c.queued+1) {
				t.Fatalf("%d queued rows exceed capacity %d", q, c.capacity)
			}
		})
	}
}

func TestRequestDeleteAuthorisation(t *testing.T) {
	hashA := strings.Repeat("a", 64)
	hashB := strings.Repeat("b", 64)
	hashC := strings.Repeat("c", 64)
	groupA := store.GroupKey{Algorithm: store.AlgoBLAKE3, HashHex: hashA}
	cases := []struct {
		name    string
		group   store.GroupKey
		req     policy.DeleteRequest
		wantErr error
	}{
		{name: "one kept, one deleted", group: groupA, req: policy.DeleteRequest{KeepFileIDs: []int64{1}, DeleteFileIDs: []int64{2}}},
		{name: "one kept, two deleted, permanent", group: groupA,
			req: policy.DeleteRequest{KeepFileIDs: []int64{3}, DeleteFileIDs: []int64{1, 2}, Permanent: true}},
		{name: "empty keep list (would delete the last copy)", group: groupA,
			req: policy.DeleteRequest{DeleteFileIDs: []int64{1, 2, 3}}, wantErr: policy.ErrInvalid},
		{name: "empty delete list", group: groupA, req: policy.DeleteRequest{KeepFileIDs: []int64{1}}, wantErr: policy.ErrInvalid},
		{name: "id both kept and deleted", group: groupA,
			req: policy.DeleteRequest{KeepFileIDs: []int64{1}, DeleteFileIDs: []int64{1}}, wantErr: policy.ErrInvalid},
		{name: "id twice in delete list", group: groupA,
			req: policy.DeleteRequest{KeepFileIDs: []int64{1}, DeleteFileIDs: []int64{2, 2}}, wantErr: policy.ErrInvalid},
		{name: "non-positive id", group: groupA,
			req: policy.DeleteRequest{KeepFileIDs: []int64{1}, DeleteFileIDs: []int64{0}}, wantErr: policy.ErrInvalid},
		{name: "too many ids", group: groupA,
			req: policy.DeleteRequest{KeepFileIDs: []int64{1}, DeleteFileIDs: seq(2, 10001)}, wantErr: policy.ErrInvalid},
		{name: "unknown group", group: store.GroupKey{Algorithm: store.AlgoBLAKE3, HashHex: strings.Repeat("f", 64)},
			req: policy.DeleteRequest{KeepFileIDs: []int64{1}, DeleteFileIDs: []int64{2}}, wantErr: store.ErrNotFound},
		{name: "same digest under another algorithm is another group", group: store.GroupKey{Algorithm: store.AlgoSHA256, HashHex: hashA},
			req: policy.DeleteRequest{KeepFileIDs: []int64{1}, DeleteFileIDs: []int64{2}}, wantErr: store.ErrNotFound},
		{name: "single-member group is no duplicate group", group: store.GroupKey{Algorithm: store.AlgoBLAKE3, HashHex: hashC},
			req: policy.DeleteRequest{KeepFileIDs: []int64{8}, DeleteFileIDs: []int64{1}}, wantErr: store.ErrNotFound},
		{name: "unknown file id", group: groupA,
			req: policy.DeleteRequest{KeepFileIDs: []int64{1}, DeleteFileIDs: []int64{999}}, wantErr: store.ErrNotFound},
		{name: "delete id of another group", group: groupA,
			req: policy.DeleteRequest{KeepFileIDs: []int64{1}, DeleteFileIDs: []int64{4}}, wantErr: policy.ErrConflict},
		{name: "kept id of another group", group: groupA,
			req: policy.DeleteRequest{KeepFileIDs: []int64{5}, DeleteFileIDs: []int64{1, 2, 3}}, wantErr: policy.ErrConflict},
		{name: "kept copy is missing on disk", group: groupA,
			req: policy.DeleteRequest{KeepFileIDs: []int64{6}, DeleteFileIDs: []int64{1, 2, 3}}, wantErr: policy.ErrConflict},
		{name: "kept copy needs a re-hash", group: groupA,
			req: policy.DeleteRequest{KeepFileIDs: []int64{7}, DeleteFileIDs: []int64{1, 2, 3}}, wantErr: policy.ErrConflict},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := context.Background()
			// 1-3 live members of A, 4-5 of B, 6 missing and 7 needs_hash
			// with A's digest, 8 the only member of C.
			files := []struct {
				hash             string
				missing, needsIt int
			}{{hashA, 0, 0}, {hashA, 0, 0}, {hashA, 0, 0}, {hashB, 0, 0}, {hashB, 0, 0}, {hashA, 1, 0}, {hashA, 0, 1}, {hashC, 0, 0}}
			for i, f := range files {
				e.insert("library_files", map[string]any{"root": "/lib", "path": "/lib/f" + string(rune('1'+i)), "size_bytes": 10,
					"hash_algorithm": store.AlgoBLAKE3, "content_hash": f.hash, "is_missing": f.missing, "needs_hash": f.needsIt})
			}
			j, err := e.p.RequestDelete(ctx, c.group, c.req)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) {
					t.Fatalf("err = %v, want %v", err, c.wantErr)
				}
				if n := e.count(`SELECT COUNT(*) FROM jobs`) + e.count(`SELECT COUNT(*) FROM thumbnail_cleanup_jobs`); n != 0 {
					t.Fatalf("refused deletion wrote %d rows", n)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if j.Kind != store.KindDelete || j.Status != store.StatusPending {
				t.Fatalf("job %+v", j)
			}
			var p struct {
				GroupKey      string  `json:"group_key"`
				KeepFileIDs   []int64 `json:"keep_file_ids"`
				DeleteFileIDs []int64 `json:"delete_file_ids"`
				Permanent     bool    `json:"permanent"`
			}
			if err := json.Unmarshal([]byte(j.Payload), &p); err != nil {
				t.Fatal(err)
			}
			if p.GroupKey != c.group.String() || !reflect.DeepEqual(p.KeepFileIDs, c.req.KeepFileIDs) ||
				!reflect.DeepEqual(p.DeleteFileIDs, c.req.DeleteFileIDs) || p.Permanent != c.req.Permanent {
				t.Fatalf("payload %s does not carry the request %+v", j.Payload, c.req)
			}
			var group, status string
			var after int64
			e.st.DB.QueryRow(`SELECT group_key, status, execute_after FROM thumbnail_cleanup_jobs`).Scan(&group, &status, &after)
			if group != c.group.String() || status != store.StatusPending || after != t0+time.Minute.Milliseconds() {
				t.Fatalf("cleanup %s %s after=%d", group, status, after)
			}
			// A second request for the same group adds a job but no second pending cleanup.
			if _, err := e.p.RequestDelete(ctx, c.group, c.req); err != nil {
				t.Fatal(err)
			}
			if n := e.count(`SELECT COUNT(*) FROM thumbnail_cleanup_jobs WHERE status = 'pending'`); n != 1 {
				t.Fatalf("%d pending cleanups for one group", n)
			}
		})
	}
}

func seq(from, to int64) []int64 {
	out := make([]int64, 0, to-from+1)
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}
