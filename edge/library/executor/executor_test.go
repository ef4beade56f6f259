package executor_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/policy"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

func TestStatementsStayInsideWhitelists(t *testing.T) {
	stmts := executor.Statements()
	if len(stmts) < 15 {
		t.Fatalf("only %d statements registered", len(stmts))
	}
	for _, s := range stmts {
		allowed := map[string]bool{}
		for _, c := range executor.Whitelists[s.Table][s.Path] {
			allowed[c] = true
		}
		for _, c := range s.Cols {
			if !allowed[c] {
				t.Errorf("%s/%s writes %s", s.Table, s.Path, c)
			}
		}
	}
	if _, err := executor.BuildUpdate("jobs", "heartbeat", []executor.Set{{Col: "status", Expr: "'failed'"}}, "id = 1"); err == nil {
		t.Fatal("heartbeat path accepted a status write")
	}
	if _, err := executor.BuildUpdate("library_files", "claim", nil, "1"); err == nil {
		t.Fatal("non-protocol table accepted")
	}
}

func TestGuardTriggersAbortForbiddenWrites(t *testing.T) {
	e := newEnv(t, true)
	if _, err := e.p.EnqueueScan(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE jobs SET kind = 'hash'`,
		`UPDATE jobs SET retry_count = 9`,
		`UPDATE jobs SET payload = '{"x":1}'`,
	} {
		if _, err := e.st.DB.Exec(q); err == nil || !strings.Contains(err.Error(), "whitelist") {
			t.Errorf("%s: err = %v, want whitelist violation", q, err)
		}
	}
	if _, err := e.st.DB.Exec(`UPDATE jobs SET progress = 0.5, updated_at = 1`); err != nil {
		t.Fatalf("whitelisted write refused: %v", err)
	}
}

func TestScanHashAndDuplicates(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	a := e.write("a.txt", "same content")
	b := e.write("sub/b.txt", "same content")
	c := e.write("sub/deeper/c.txt", "other")
	secret := filepath.Join(e.outside, "secret.txt")
	os.WriteFile(secret, []byte("same content"), 0o644)
	os.Symlink(secret, filepath.Join(e.root, "escape.txt")) // outside: refused
	os.Symlink(a, filepath.Join(e.root, "inside-link.txt")) // inside: skipped
	e.scanAndHash()

	var n int
	e.st.DB.QueryRow(`SELECT COUNT(*) FROM library_files`).Scan(&n)
	if n != 3 {
		t.Fatalf("%d files recorded, want 3 (symlinks never recorded)", n)
	}
	var refused, seen int64
	var status string
	e.st.DB.QueryRow(`SELECT status, files_seen, files_refused FROM scan_sessions ORDER BY id DESC`).Scan(&status, &seen, &refused)
	if status != "succeeded" || seen != 3 || refused != 1 {
		t.Fatalf("scan session %s seen=%d refused=%d", status, seen, refused)
	}
	groups, _, err := e.st.ListGroups(ctx, nil, 10)
	if err != nil || len(groups) != 1 || groups[0].FileCount != 2 {
		t.Fatalf("groups %+v %v", groups, err)
	}
	if fa := e.file(a); fa.NeedsHash || *fa.HashAlgorithm != "blake3" {
		t.Fatalf("a not hashed: %+v", fa)
	}

	// Change one file, remove another: rescan marks needs_hash and missing.
	time.Sleep(10 * time.Millisecond)
	os.WriteFile(b, []byte("same content, longer now"), 0o644)
	os.Remove(c)
	if _, err := e.p.EnqueueScan(ctx); err != nil {
		t.Fatal(err)
	}
	e.runJob()
	if fb := e.file(b); !fb.NeedsHash || fb.ContentHash != nil {
		t.Fatalf("changed file not marked: %+v", fb)
	}
	if fc := e.file(c); !fc.IsMissing {
		t.Fatalf("vanished file not missing: %+v", fc)
	}
	if groups, _, _ := e.st.ListGroups(ctx, nil, 10); len(groups) != 0 {
		t.Fatalf("stale group still listed: %+v", groups)
	}
}

func TestHashSHA256AndSymlinkRowRefused(t *testing.T) {
	e := newEnv(t, true)
	e.p.HashAlgorithm = store.AlgoSHA256
	a := e.write("a.bin", "abc")
	secret := filepath.Join(e.outside, "secret")
	os.WriteFile(secret, []byte("top secret"), 0o644)
	link := filepath.Join(e.root, "link")
	os.Symlink(secret, link)
	// A row naming the symlink (e.g. from an older scanner) is never read.
	e.st.DB.Exec(`INSERT INTO library_files(root, path, size_bytes, mtime_ns, needs_hash) VALUES (?, ?, 10, 0, 1)`, e.root, link)
	e.scanAndHash()
	if fa := e.file(a); *fa.ContentHash != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatalf("sha256 of abc = %v", *fa.ContentHash)
	}
	if fl := e.file(link); !fl.NeedsHash || fl.ContentHash != nil {
		t.Fatalf("symlink escaping the root was hashed: %+v", fl)
	}
	if _, _, _, err := e.x.HashFile(context.Background(), link, "blake3", nil); err == nil {
		t.Fatal("HashFile read through an escaping symlink")
	}
}

func TestConcurrentScanRequestsOneActive(t *testing.T) {
	e := newEnv(t, false)
	ctx := context.Background()
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		go func() { _, err := e.p.EnqueueScan(ctx); errs <- err }()
	}
	ok := 0
	for i := 0; i < 20; i++ {
		err := <-errs
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, policy.ErrActive):
			t.Fatalf("unexpected error %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d scans admitted, want 1", ok)
	}
}

func TestJobLeaseRecoveryAndFencing(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	e.p.EnqueueScan(ctx)
	c, err := e.x.ClaimJob(ctx)
	if err != nil || c == nil {
		t.Fatalf("claim %v %v", c, err)
	}
	if err := c.Heartbeat(ctx); err != nil {
		t.Fatalf("live heartbeat: %v", err)
	}
	e.st.DB.Exec(`UPDATE jobs SET lease_expires_at = 1 WHERE id = ?`, c.Job.ID)
	if n, err := e.x.RecoverStaleJobs(ctx); err != nil || n != 1 {
		t.Fatalf("recovered %d %v", n, err)
	}
	j, _ := e.st.GetJob(ctx, c.Job.ID)
	if j.Status != store.StatusRetryable || j.WorkerID != nil || j.LeaseExpiresAt != nil || deref(j.ErrorCode) != executor.CodeLeaseExpired {
		t.Fatalf("recovered job %+v", j)
	}
	var se *lease.StaleError
	if err := c.Heartbeat(ctx); !errors.As(err, &se) {
		t.Fatalf("heartbeat after recovery = %v, want StaleError", err)
	}
	if err := c.Finish(ctx, store.StatusCompleted, "", ""); !errors.Is(err, lease.ErrStale) {
		t.Fatalf("finish after recovery = %v", err)
	}
}

func TestPolicyRecoveryRequeuesAfterBackoff(t *testing.T) {
	e := newEnv(t, false)
	ctx := context.Background()
	e.p.EnqueueScan(ctx)
	c, _ := e.x.ClaimJob(ctx)
	e.st.DB.Exec(`UPDATE jobs SET lease_expires_at = 1 WHERE id = ?`, c.Job.ID)
	if n, _ := e.p.RecoverStaleJobs(ctx); n != 1 {
		t.Fatal("policy did not recover the stale job")
	}
	b := lease.Backoff{Base: time.Millisecond, Cap: time.Millisecond}
	e.p.RequeueRetryable(ctx, b) // sets retry_after
	time.Sleep(5 * time.Millisecond)
	e.p.RequeueRetryable(ctx, b)
	j, _ := e.st.GetJob(ctx, c.Job.ID)
	if j.Status != store.StatusPending || j.RetryCount != 1 {
		t.Fatalf("requeued job %s retries=%d", j.Status, j.RetryCount)
	}
}
