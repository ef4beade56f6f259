package executor_test

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/policy"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

func groupOf(t *testing.T, f store.File) store.GroupKey {
	k, err := store.ParseGroupKey(*f.HashAlgorithm + ":" + *f.ContentHash)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func decisions(t *testing.T, e *env, job int64) map[int64]store.Decision {
	ds, err := e.st.Decisions(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]store.Decision{}
	for _, d := range ds {
		out[d.FileID] = d
	}
	return out
}

func TestDeleteTrashesVerifiedDuplicatesOnly(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	a := e.write("a.txt", "dup")
	b := e.write("b.txt", "dup")
	c := e.write("c.txt", "dup")
	e.scanAndHash()
	fa, fb, fc := e.file(a), e.file(b), e.file(c)
	k := groupOf(t, fa)
	// c changes content behind the index's back (same size and mtime).
	st, _ := os.Stat(c)
	os.WriteFile(c, []byte("DUP"), 0o644)
	os.Chtimes(c, st.ModTime(), st.ModTime())

	j, err := e.p.RequestDelete(ctx, k, policy.DeleteRequest{KeepFileIDs: []int64{fa.ID}, DeleteFileIDs: []int64{fb.ID, fc.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.runJob(); got.ID != j.ID || got.Status != store.StatusCompleted {
		t.Fatalf("delete job %+v", got)
	}
	d := decisions(t, e, j.ID)
	if d[fa.ID].Decision != executor.DecisionKeep || d[fb.ID].Decision != executor.DecisionTrashed || d[fc.ID].Decision != executor.DecisionRefused {
		t.Fatalf("decisions %+v", d)
	}
	if !strings.Contains(d[fc.ID].Reason, "content changed") {
		t.Fatalf("refusal reason %q", d[fc.ID].Reason)
	}
	if _, err := os.Stat(b); !os.IsNotExist(err) {
		t.Fatal("b still in the library")
	}
	trash := *d[fb.ID].TrashPath
	if !strings.HasPrefix(trash, e.x.Trash.Path()+"/") {
		t.Fatalf("trash path %s outside the trash", trash)
	}
	if got, _ := os.ReadFile(trash); string(got) != "dup" {
		t.Fatal("trashed content differs")
	}
	for _, p := range []string{a, c} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s removed: %v", p, err)
		}
	}
	if !e.file(b).IsMissing || !e.file(c).NeedsHash {
		t.Fatal("index not updated after delete")
	}
}

func TestDeleteNeverRemovesLastCopy(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	a := e.write("a.txt", "dup")
	b := e.write("b.txt", "dup")
	e.scanAndHash()
	fa, fb := e.file(a), e.file(b)
	k := groupOf(t, fa)
	// Policy: keeping nothing is refused outright.
	if _, err := e.p.RequestDelete(ctx, k, policy.DeleteRequest{DeleteFileIDs: []int64{fa.ID, fb.ID}}); err == nil {
		t.Fatal("delete of every copy authorised")
	}
	// The kept copy vanishes before the executor runs: nothing is removed.
	j, err := e.p.RequestDelete(ctx, k, policy.DeleteRequest{KeepFileIDs: []int64{fa.ID}, DeleteFileIDs: []int64{fb.ID}, Permanent: true})
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(a)
	got := e.runJob()
	if got.Status != store.StatusFailed || deref(got.ErrorCode) != executor.CodeDeleteRefused {
		t.Fatalf("job %s %s", got.Status, deref(got.ErrorCode))
	}
	if _, err := os.Stat(b); err != nil {
		t.Fatal("last copy deleted")
	}
	if d := decisions(t, e, j.ID); d[fb.ID].Decision != executor.DecisionRefused {
		t.Fatalf("decisions %+v", d)
	}
}

func TestDeleteRefusesSymlinkEscape(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	a := e.write("a.txt", "dup")
	b := e.write("b.txt", "dup")
	e.scanAndHash()
	fa, fb := e.file(a), e.file(b)
	// b is replaced by a symlink to an identical file outside the root.
	victim := filepath.Join(e.outside, "victim.txt")
	os.WriteFile(victim, []byte("dup"), 0o644)
	os.Remove(b)
	os.Symlink(victim, b)
	j, _ := e.p.RequestDelete(ctx, groupOf(t, fa), policy.DeleteRequest{KeepFileIDs: []int64{fa.ID}, DeleteFileIDs: []int64{fb.ID}, Permanent: true})
	e.runJob()
	if _, err := os.Stat(victim); err != nil {
		t.Fatal("file outside the root was deleted")
	}
	if d := decisions(t, e, j.ID); d[fb.ID].Decision != executor.DecisionRefused {
		t.Fatalf("decision %+v", d[fb.ID])
	}
}

func writeJPEG(t *testing.T, path string, w, h int) {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, color.RGBA{uint8(x), uint8(y), 90, 255})
		}
	}
	var buf bytes.Buffer
	jpeg.Encode(&buf, img, nil)
	os.WriteFile(path, buf.Bytes(), 0o644)
}

func (e *env) admit(path, format string, size int) policy.Thumb {
	e.t.Helper()
	th, err := e.p.AdmitThumbnail(context.Background(), e.file(path), format, size)
	if err != nil {
		e.t.Fatal(err)
	}
	return th
}

func (e *env) thumbStatus(id int64) (status, code string, w, h int) {
	var c *string
	var ww, hh *int
	e.st.DB.QueryRow(`SELECT status, error_code, width, height FROM thumbnails WHERE id = ?`, id).Scan(&status, &c, &ww, &hh)
	if ww != nil {
		w, h = *ww, *hh
	}
	return status, deref(c), w, h
}

func TestThumbnailsImagesAndVideo(t *testing.T) {
	e := newEnv(t, true)
	e.x.IOBytesPerSec = 1 << 30
	jpg := filepath.Join(e.root, "p.jpg")
	writeJPEG(t, jpg, 400, 200)
	pngPath := filepath.Join(e.root, "p.png")
	var buf bytes.Buffer
	png.Encode(&buf, image.NewGray(image.Rect(0, 0, 50, 100)))
	os.WriteFile(pngPath, buf.Bytes(), 0o644)
	broken := e.write("broken.jpg", "not an image")
	e.scanAndHash()

	cases := []struct {
		path, format string
		w, h         int
		status       string
	}{
		{jpg, store.FormatJPEG, 100, 50, store.StatusReady},
		{pngPath, store.FormatJPEG, 50, 100, store.StatusReady},
		{broken, store.FormatJPEG, 0, 0, store.StatusFailed},
	}
	if _, err := exec.LookPath("ffmpeg"); err == nil || os.Getenv("CI") == "true" {
		ff := testsvc.Program(t, "ffmpeg")
		video := filepath.Join(e.root, "v.mp4")
		out, err := exec.Command(ff, "-hide_banner", "-loglevel", "error", "-f", "lavfi", "-i", "testsrc=size=320x240:rate=10:duration=2",
			"-pix_fmt", "yuv420p", video).CombinedOutput()
		if err != nil {
			t.Fatalf("make video: %v %s", err, out)
		}
		e.scanAndHash()
		cases = append(cases,
			struct {
				path, format string
				w, h         int
				status       string
			}{jpg, store.FormatWebP, 100, 50, store.StatusReady},
			struct {
				path, format string
				w, h         int
				status       string
			}{video, store.FormatJPEG, 100, 75, store.StatusReady},
			struct {
				path, format string
				w, h         int
				status       string
			}{video, store.FormatWebP, 100, 75, store.StatusReady})
	}
	for _, c := range cases {
		th := e.admit(c.path, c.format, 100)
		if did, err := e.x.RunThumbnailOnce(context.Background()); !did || err != nil {
			t.Fatalf("%s: did=%v err=%v", c.path, did, err)
		}
		status, code, w, h := e.thumbStatus(th.ID)
		if status != c.status || w != c.w || h != c.h {
			t.Errorf("%s/%s: %s %s %dx%d, want %s %dx%d", filepath.Base(c.path), c.format, status, code, w, h, c.status, c.w, c.h)
		}
		if status == store.StatusReady && !strings.HasPrefix(th.OutputPath, e.x.Thumbs.Path()+"/") {
			t.Errorf("output %s outside thumbs", th.OutputPath)
		}
	}
	// The failed row carries error metadata and is requeued only after retry_after.
	e.st.DB.Exec(`UPDATE thumbnails SET retry_after = ? WHERE source_path = ?`, time.Now().Add(time.Hour).UnixMilli(), broken)
	th := e.admit(broken, store.FormatJPEG, 100)
	if th.Status != store.StatusFailed || th.ErrorCode == nil || th.RetryAfter == nil || th.ErrorCount != 1 {
		t.Fatalf("failed thumbnail %+v", th)
	}
	e.st.DB.Exec(`UPDATE thumbnails SET retry_after = ? WHERE id = ?`, time.Now().Add(time.Hour).UnixMilli(), th.ID)
	if n, _ := e.p.RequeueFailedThumbnails(context.Background()); n != 0 {
		t.Fatal("requeued before retry_after")
	}
	e.st.DB.Exec(`UPDATE thumbnails SET retry_after = 1 WHERE id = ?`, th.ID)
	if n, _ := e.p.RequeueFailedThumbnails(context.Background()); n != 1 {
		t.Fatal("not requeued after retry_after")
	}
	var bucket int
	e.st.DB.QueryRow(`SELECT COUNT(*) FROM io_rate_limits WHERE bucket_key = 'thumbnail_io_global'`).Scan(&bucket)
	if bucket != 1 {
		t.Fatal("global I/O bucket not used")
	}
}

// TestThumbnailRerenderedWhenSourceChanged: a ready thumbnail whose cache
// file is still there is not served once its source file changed: the
// next request after the rescan replaces the row with a new pending one
// (the old picture removed), and what is served after rendering is the new
// picture, in the new file's group.
func TestThumbnailRerenderedWhenSourceChanged(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	jpg := filepath.Join(e.root, "p.jpg")
	writeJPEG(t, jpg, 400, 200)
	e.scanAndHash()
	first := e.admit(jpg, store.FormatJPEG, 100)
	if did, err := e.x.RunThumbnailOnce(ctx); !did || err != nil {
		t.Fatalf("did=%v err=%v", did, err)
	}
	if th := e.admit(jpg, store.FormatJPEG, 100); th.ID != first.ID || th.Status != store.StatusReady || *th.Width != 100 || *th.Height != 50 {
		t.Fatalf("first render %+v", th)
	}

	writeJPEG(t, jpg, 100, 300)
	e.scanAndHash()
	th := e.admit(jpg, store.FormatJPEG, 100)
	if th.ID == first.ID || th.Status != store.StatusPending {
		t.Fatalf("after the source changed: row %d %s, want a new pending row (old %d)", th.ID, th.Status, first.ID)
	}
	if _, err := os.Stat(first.OutputPath); !os.IsNotExist(err) {
		t.Fatalf("old picture still in the cache: %v", err)
	}
	if did, err := e.x.RunThumbnailOnce(ctx); !did || err != nil {
		t.Fatalf("did=%v err=%v", did, err)
	}
	th = e.admit(jpg, store.FormatJPEG, 100)
	if th.Status != store.StatusReady || *th.Width != 33 || *th.Height != 100 {
		t.Fatalf("served after the re-render: %s %vx%v, want ready 33x100", th.Status, derefI(th.Width), derefI(th.Height))
	}
	served, err := os.Open(th.OutputPath)
	if err != nil {
		t.Fatal(err)
	}
	defer served.Close()
	cfg, err := jpeg.DecodeConfig(served)
	if err != nil || cfg.Width != 33 || cfg.Height != 100 {
		t.Fatalf("served file %dx%d (%v), want the new 33x100 picture", cfg.Width, cfg.Height, err)
	}
	if g := groupOf(t, e.file(jpg)).String(); th.GroupKey == nil || *th.GroupKey != g {
		t.Fatalf("row group %v, want the file's new group %s", th.GroupKey, g)
	}
	var rows int
	e.st.DB.QueryRow(`SELECT COUNT(*) FROM thumbnails`).Scan(&rows)
	if rows != 1 {
		t.Fatalf("%d thumbnail rows, want the one re-rendered row", rows)
	}
}

func TestThumbnailSymlinkEscapeRefused(t *testing.T) {
	e := newEnv(t, true)
	secret := filepath.Join(e.outside, "secret.jpg")
	writeJPEG(t, secret, 10, 10)
	link := filepath.Join(e.root, "x.jpg")
	os.Symlink(secret, link)
	e.st.DB.Exec(`INSERT INTO library_files(root, path, size_bytes, mtime_ns, needs_hash) VALUES (?, ?, 1, 0, 1)`, e.root, link)
	th := e.admit(link, store.FormatJPEG, 64)
	e.x.RunThumbnailOnce(context.Background())
	if status, code, _, _ := e.thumbStatus(th.ID); status != store.StatusFailed || code != executor.CodeSourceRefused {
		t.Fatalf("symlink thumbnail %s %s", status, code)
	}
}

func TestThumbnailAdmissionCapacity(t *testing.T) {
	e := newEnv(t, false)
	e.p.ThumbQueueCapacity = 3
	for i := 0; i < 6; i++ {
		e.write(filepath.Join("imgs", string(rune('a'+i))+".jpg"), "x")
	}
	e.scanAndHash()
	ctx := context.Background()
	files, _ := e.st.FilesToHash(ctx, 0, 100)
	_ = files
	rows, _ := e.st.DB.Query(`SELECT id FROM library_files`)
	var ids []int64
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		ids = append(ids, id)
	}
	rows.Close()
	errs := make(chan error, len(ids))
	for _, id := range ids {
		go func() {
			f, _ := e.st.GetFile(ctx, id)
			_, err := e.p.AdmitThumbnail(ctx, f, store.FormatJPEG, 64)
			errs <- err
		}()
	}
	full := 0
	for range ids {
		if err := <-errs; err == policy.ErrQueueFull {
			full++
		}
	}
	var queued int
	e.st.DB.QueryRow(`SELECT COUNT(*) FROM thumbnails WHERE status IN ('pending','running')`).Scan(&queued)
	if queued != 3 || full != 3 {
		t.Fatalf("queued=%d refused=%d, want 3 and 3", queued, full)
	}
}

func TestThumbnailAndCleanupLeaseRecovery(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	jpg := filepath.Join(e.root, "p.jpg")
	writeJPEG(t, jpg, 20, 20)
	e.scanAndHash()
	th := e.admit(jpg, store.FormatJPEG, 16)
	task, err := e.x.ClaimThumbnail(ctx)
	if err != nil || task == nil {
		t.Fatal(err)
	}
	e.st.DB.Exec(`UPDATE thumbnails SET lease_expires_at = 1 WHERE id = ?`, th.ID)
	if n, _ := e.x.RequeueStaleThumbnails(ctx); n != 1 {
		t.Fatal("stale thumbnail not requeued")
	}
	var status string
	var worker *string
	e.st.DB.QueryRow(`SELECT status, worker_id FROM thumbnails WHERE id = ?`, th.ID).Scan(&status, &worker)
	if status != store.StatusPending || worker != nil {
		t.Fatalf("requeued thumbnail %s %v", status, worker)
	}

	// Cleanup rows: stale running -> pending.
	e.p.ScheduleCleanup(ctx, "blake3:x", 0)
	e.st.DB.Exec(`DELETE FROM thumbnails`)
	e.st.DB.Exec(`INSERT INTO thumbnail_cleanup_jobs(group_key, status, execute_after, worker_id, lease_expires_at) VALUES ('g', 'running', 0, 'dead', 1)`)
	if did, err := e.x.RunCleanupOnce(ctx); !did || err != nil {
		t.Fatalf("cleanup did=%v err=%v", did, err)
	}
	e.x.RunCleanupOnce(ctx)
	var n int
	e.st.DB.QueryRow(`SELECT COUNT(*) FROM thumbnail_cleanup_jobs WHERE status = 'completed'`).Scan(&n)
	if n != 2 {
		t.Fatalf("%d cleanups completed, want 2 (one recovered)", n)
	}
}

// A thumbnail path that is inside the cache only once cleaned — a ".."
// after a symlink that leads out of it — is removed as cleaned: the kernel
// would have walked the symlink first and removed the original instead.
func TestCleanupRemovesThePathItChecked(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	a := filepath.Join(e.root, "a.jpg")
	writeJPEG(t, a, 30, 30)
	data, _ := os.ReadFile(a)
	os.WriteFile(filepath.Join(e.root, "b.jpg"), data, 0o644)
	sub := filepath.Join(e.root, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	e.scanAndHash()
	e.admit(a, store.FormatJPEG, 16)
	e.x.RunThumbnailOnce(ctx)
	thumbs := e.x.Thumbs.Path()
	if err := os.Symlink(sub, filepath.Join(thumbs, "escape")); err != nil {
		t.Fatal(err)
	}
	group := groupOf(t, e.file(a)).String()
	hostile := filepath.Join(thumbs, "escape") + "/../a.jpg" // cleaned: <thumbs>/a.jpg
	e.st.DB.Exec(`INSERT INTO thumbnails(file_id, group_key, source_path, output_path, status) VALUES (1, ?, ?, ?, 'ready')`, group, a, hostile)
	e.p.ScheduleCleanup(ctx, group, 0)
	if did, _ := e.x.RunCleanupOnce(ctx); !did {
		t.Fatal("due cleanup not claimed")
	}
	if _, err := os.Stat(a); err != nil {
		t.Fatalf("original removed through %s: %v", hostile, err)
	}
}

func TestCleanupWaitsAndNeverTouchesOriginals(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	a := filepath.Join(e.root, "a.jpg")
	b := filepath.Join(e.root, "b.jpg")
	writeJPEG(t, a, 30, 30)
	data, _ := os.ReadFile(a)
	os.WriteFile(b, data, 0o644)
	e.scanAndHash()
	ta := e.admit(a, store.FormatJPEG, 16)
	tb := e.admit(b, store.FormatJPEG, 16)
	group := groupOf(t, e.file(a)).String()
	e.p.ScheduleCleanup(ctx, group, 0)
	// Thumbnails still pending: the cleanup is not claimable.
	if did, _ := e.x.RunCleanupOnce(ctx); did {
		t.Fatal("cleanup claimed while thumbnails were pending")
	}
	e.x.RunThumbnailOnce(ctx)
	e.x.RunThumbnailOnce(ctx)
	// A hostile row pointing at an original: refused, original kept.
	e.st.DB.Exec(`INSERT INTO thumbnails(file_id, group_key, source_path, output_path, status) VALUES (1, ?, ?, ?, 'ready')`, group, a, a)
	if did, _ := e.x.RunCleanupOnce(ctx); !did {
		t.Fatal("due cleanup not claimed")
	}
	for _, p := range []string{a, b} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("original %s touched: %v", p, err)
		}
	}
	var status string
	var code *string
	e.st.DB.QueryRow(`SELECT status, error_code FROM thumbnail_cleanup_jobs`).Scan(&status, &code)
	if status != store.StatusFailed {
		t.Fatalf("cleanup with a path outside thumbs: %s", status)
	}
	// Without the hostile row the cleanup removes cache files and rows.
	e.st.DB.Exec(`DELETE FROM thumbnails WHERE output_path = ?`, a)
	e.p.ScheduleCleanup(ctx, group, 0)
	e.x.RunCleanupOnce(ctx)
	var left int
	e.st.DB.QueryRow(`SELECT COUNT(*) FROM thumbnails`).Scan(&left)
	if left != 0 {
		t.Fatalf("%d thumbnail rows left", left)
	}
	for _, th := range []policy.Thumb{ta, tb} {
		if _, err := os.Stat(th.OutputPath); !os.IsNotExist(err) {
			t.Fatalf("cache file %s left", th.OutputPath)
		}
	}
	for _, p := range []string{a, b} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("original %s touched: %v", p, err)
		}
	}
}

func TestWALMaintenance(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	for i := 0; i < 50; i++ {
		e.st.DB.Exec(`INSERT INTO jobs(kind,status) VALUES ('delete','completed')`)
	}
	w, err := e.p.EnqueueWAL(ctx, "truncate")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.EnqueueWAL(ctx, "full"); err == nil {
		t.Fatal("unknown mode accepted")
	}
	if did, err := e.x.RunWALOnce(ctx); !did || err != nil {
		t.Fatalf("did=%v err=%v", did, err)
	}
	var status string
	var busy, logf, done *int64
	e.st.DB.QueryRow(`SELECT status, checkpoint_busy, checkpoint_log_frames, checkpointed_frames FROM wal_maintenance_jobs WHERE id = ?`, w.ID).
		Scan(&status, &busy, &logf, &done)
	if status != store.StatusCompleted || busy == nil || *busy != 0 || logf == nil || done == nil {
		t.Fatalf("wal job %s %v %v %v", status, busy, logf, done)
	}

	// A reader holding a snapshot makes RESTART busy -> retryable with backoff.
	reader, err := e.st.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	reader.ExecContext(ctx, "BEGIN DEFERRED")
	var n int
	reader.QueryRowContext(ctx, "SELECT COUNT(*) FROM jobs").Scan(&n)
	e.st.DB.Exec(`INSERT INTO jobs(kind,status) VALUES ('delete','completed')`)
	w2, _ := e.p.EnqueueWAL(ctx, "restart")
	e.x.RunWALOnce(ctx)
	var retries int64
	var retryAfter *int64
	e.st.DB.QueryRow(`SELECT status, retry_count, retry_after, checkpoint_busy FROM wal_maintenance_jobs WHERE id = ?`, w2.ID).
		Scan(&status, &retries, &retryAfter, &busy)
	reader.ExecContext(ctx, "ROLLBACK")
	if status != store.StatusRetryable || retries != 1 || retryAfter == nil || busy == nil || *busy == 0 {
		t.Fatalf("busy checkpoint: %s retries=%d after=%v busy=%v", status, retries, retryAfter, busy)
	}

	// Stale running rows recover to retryable with metadata.
	e.st.DB.Exec(`INSERT INTO wal_maintenance_jobs(requested_mode, status, worker_id, lease_expires_at) VALUES ('passive','running','dead',1)`)
	if n, _ := e.x.RecoverStaleWAL(ctx); n != 1 {
		t.Fatal("stale wal row not recovered")
	}
	var code string
	e.st.DB.QueryRow(`SELECT status, error_code, retry_count FROM wal_maintenance_jobs WHERE worker_id IS NULL AND requested_mode = 'passive'`).Scan(&status, &code, &retries)
	if status != store.StatusRetryable || code != executor.CodeLeaseExpired || retries != 1 {
		t.Fatalf("recovered wal row %s %s %d", status, code, retries)
	}
}
