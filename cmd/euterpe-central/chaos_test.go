//go:build chaos

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/central/webhook"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// The chaos run of central: jobs go through three `euterpe-central serve`
// processes (the test binary's executor role, on the real lease, SQL and
// outbox) while a seeded schedule SIGKILLs and restarts one every 2–5 s,
// pauses one past its lease (so its next writes are fenced), restarts the
// Postgres server itself, or on SQLite kills the process that holds the
// write lock. A webhook receiver verifies every signature, dead-letters a
// fixed share of events with 410 and fails a share of attempts with 503.
// Then every job and every event is audited. Sizes: EUTERPE_CHAOS_CENTRAL_JOBS
// (default 10,000 per engine).
func TestChaosCentral(t *testing.T) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) { centralChaos(t, e) })
	}
}

const chaosLease = 1500 * time.Millisecond

// chaosReceiver is the requester's webhook endpoint.
type chaosReceiver struct {
	v         *webhook.Verifier
	mu        sync.Mutex
	attempts  map[string][]int64 // job -> sequence of every verified attempt, in arrival order
	delivered map[string]int     // event_id -> 2xx answers
	gone      map[string]bool    // event_id answered 410
	badSig    int
	flaky     atomic.Int64
}

// goneEvent: a fixed 0.5 % of events is refused with 410 Gone, so the
// dead-letter path and the gaps it leaves are part of every run.
func goneEvent(id string) bool {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return h.Sum32()%200 == 0
}

func (rc *chaosReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if _, err := rc.v.Verify(r.Context(), r.Header, body, time.Now()); err != nil {
		rc.mu.Lock()
		rc.badSig++
		rc.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var ev inbox.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.attempts[ev.JobID] = append(rc.attempts[ev.JobID], ev.Sequence)
	switch {
	case goneEvent(ev.EventID):
		rc.gone[ev.EventID] = true
		w.WriteHeader(http.StatusGone)
	case rc.flaky.Add(1)%50 == 0: // 2 % of attempts fail and are retried
		w.WriteHeader(http.StatusServiceUnavailable)
	default:
		rc.delivered[ev.EventID]++
		w.WriteHeader(http.StatusNoContent)
	}
}

// slot is one of the three serve processes; a restart keeps its pod name,
// as a restarted pod does.
type slot struct {
	pod    string
	child  *child
	killed bool
}

type centralCluster struct {
	t     *testing.T
	f     *fixture
	env   func(pod string) []string
	mu    sync.Mutex
	slots []*slot
	logs  []*lockedBuffer // of every process ever started
	crash int             // exits nobody asked for
}

func (c *centralCluster) start(s *slot) time.Duration {
	c.t.Helper()
	begin := time.Now()
	ch := startChild(c.t, c.env(s.pod), "serve")
	var addr string
	select {
	case addr = <-ch.addr:
	case <-ch.exited:
		c.t.Fatalf("%s exited at start:\n%s", s.pod, ch.logs.String())
	case <-time.After(60 * time.Second):
		c.t.Fatalf("%s did not listen:\n%s", s.pod, ch.logs.String())
	}
	waitFor(c.t, 60*time.Second, s.pod+" ready", func() bool {
		resp, err := http.Get("http://" + addr + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	c.mu.Lock()
	s.child, s.killed = ch, false
	c.logs = append(c.logs, ch.logs)
	c.mu.Unlock()
	return time.Since(begin)
}

// startPods starts n serve processes, pod-0 … pod-(n-1).
func (c *centralCluster) startPods(n int) {
	for i := 0; i < n; i++ {
		s := &slot{pod: fmt.Sprintf("pod-%d", i)}
		c.slots = append(c.slots, s)
		c.start(s)
	}
}

// kill SIGKILLs the slot's process and waits until it is gone.
func (c *centralCluster) kill(s *slot) {
	c.mu.Lock()
	s.killed = true
	ch := s.child
	c.mu.Unlock()
	_ = ch.cmd.Process.Signal(syscall.SIGKILL)
	<-ch.exited
}

// reviveCrashed restarts every process that exited on its own (a finding:
// the daemons must carry on through every fault injected here).
func (c *centralCluster) reviveCrashed() {
	for _, s := range c.slots {
		c.mu.Lock()
		crashed := s.child.done() && !s.killed
		c.mu.Unlock()
		if crashed {
			c.crash++
			c.t.Logf("%s exited on its own:\n%s", s.pod, tailString(s.child.logs.String(), 4000))
			c.start(s)
		}
	}
}

func tailString(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func (c *centralCluster) pids() map[int]*slot {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[int]*slot{}
	for _, s := range c.slots {
		if !s.child.done() {
			m[s.child.cmd.Process.Pid] = s
		}
	}
	return m
}

func centralChaos(t *testing.T, e sqldb.Engine) {
	n := testsvc.ChaosSize(t, "EUTERPE_CHAOS_CENTRAL_JOBS", 10000)
	ch := testsvc.NewChaos(t, "central-"+string(e))
	f := newFixture(t, e)
	keys, err := credentials.ParseKeyring(f.keyring, "")
	if err != nil {
		t.Fatal(err)
	}
	req, err := requesters.New(f.db, keys).Create(context.Background(), "chaos")
	if err != nil {
		t.Fatal(err)
	}
	rc := &chaosReceiver{v: webhook.NewVerifier([]byte(req.WebhookSecret)), attempts: map[string][]int64{},
		delivered: map[string]int{}, gone: map[string]bool{}}
	hook := httptest.NewServer(rc)
	t.Cleanup(hook.Close)

	enqueueChaosJobs(t, f, req.RequesterID, hook.URL, n)

	c := &centralCluster{t: t, f: f, env: func(pod string) []string {
		return []string{"EUTERPE_DATABASE_URL=" + f.url, "EUTERPE_KEYRING=" + f.keyring, "POD_NAME=" + pod,
			"EUTERPE_CENTRAL_ROLES=api,sweeper,test-executor,dispatcher", "EUTERPE_TEST_EXECUTOR_STEP=1ms",
			"EUTERPE_TEST_EXECUTOR_LEASE=" + chaosLease.String(), "EUTERPE_SWEEP_INTERVAL=300ms",
			"EUTERPE_RETRY_BACKOFF_BASE=50ms", "EUTERPE_RETRY_BACKOFF_MAX=500ms", "EUTERPE_MAX_ATTEMPTS=25",
			"EUTERPE_WEBHOOK_ALLOW_PRIVATE=true", "EUTERPE_OUTBOX_LEASE_TTL=2s", "EUTERPE_OUTBOX_TIMEOUT=1s", "EUTERPE_OUTBOX_BACKOFF_BASE=50ms",
			"EUTERPE_OUTBOX_BACKOFF_MAX=500ms", "EUTERPE_OUTBOX_POLL_MIN=50ms", "EUTERPE_OUTBOX_POLL_MAX=200ms",
			"EUTERPE_OUTBOX_BATCH=25", "EUTERPE_OUTBOX_CONCURRENCY=10", "EUTERPE_LOG_LEVEL=info",
			"EUTERPE_STATE_DIR=" + t.TempDir()}
	}}
	c.startPods(3)

	// Both tolerate the database being down: the loop just asks again.
	terminal := func() int {
		n, _ := countErr(f.db, `SELECT COUNT(*) FROM inbox_jobs WHERE status IN ('succeeded','failed','dead_letter')`)
		return n
	}
	succeeded := func() int {
		n, _ := countErr(f.db, `SELECT COUNT(*) FROM inbox_jobs WHERE status = 'succeeded'`)
		return n
	}
	// progressAfter waits until a job succeeds after the fault (or all are
	// done): the time the cluster as a whole took to carry on.
	progressAfter := func(before int, since time.Time) time.Duration {
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			if s, err := countErr(f.db, `SELECT COUNT(*) FROM inbox_jobs WHERE status = 'succeeded'`); err == nil && s > before {
				return time.Since(since)
			}
			if d, err := countErr(f.db, `SELECT COUNT(*) FROM inbox_jobs WHERE status IN ('succeeded','failed','dead_letter')`); err == nil && d >= n {
				return time.Since(since)
			}
			time.Sleep(20 * time.Millisecond)
		}
		ch.Failf(nil, "no job succeeded within 2 min of a fault")
		return time.Since(since)
	}

	stopSampler := sampleProgress(t, ch, f, terminal)

	// The schedule: the engine's own fault comes second, a pause past the
	// lease third, SIGKILL + restart of a random process otherwise.
	special := map[int]string{1: "engine", 2: "pause"}
	// A generous deadline: SQLite runs at about 90 jobs/s here.
	deadline := time.Now().Add(time.Duration(n)*250*time.Millisecond + 5*time.Minute)
	// At least three faults, so even a short run meets the engine's own.
	for i := 0; i < 3 || terminal() < n; i++ {
		if time.Now().After(deadline) {
			ch.Failf(nil, "jobs still running at the deadline: %d of %d terminal", terminal(), n)
			break
		}
		time.Sleep(ch.Between(2*time.Second, 5*time.Second))
		c.reviveCrashed()
		if i >= 3 && terminal() >= n {
			break
		}
		before, at := succeeded(), time.Now()
		switch special[i] {
		case "engine":
			if e == sqldb.Postgres {
				if restartPostgres(t, ch) {
					ch.Fault("postgres server restart", progressAfter(before, at))
				}
			} else if s := killWriteLockHolder(t, c); s != nil {
				ready := c.start(s)
				ch.Fault("SIGKILL holding the SQLite write lock", max(ready, progressAfter(before, at)))
			}
		case "pause":
			s := c.slots[ch.Pick(len(c.slots))]
			_ = s.child.cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(3 * chaosLease)
			_ = s.child.cmd.Process.Signal(syscall.SIGCONT)
			ch.Fault("SIGSTOP past the lease", progressAfter(before, at))
		default:
			s := c.slots[ch.Pick(len(c.slots))]
			c.kill(s)
			ready := c.start(s)
			ch.Fault("SIGKILL + restart", max(ready, time.Since(at)))
		}
	}
	stopSampler()
	c.reviveCrashed()
	// Every event must leave the outbox: delivered, dead-lettered or skipped.
	drainBegin := time.Now()
	for left := -1; left != 0; {
		left, _ = countErr(f.db, `SELECT COUNT(*) FROM job_outbox_events WHERE status IN ('pending','delivering')`)
		if left != 0 && time.Since(drainBegin) > 10*time.Minute {
			// The audit below names the jobs whose events are left.
			ch.Failf(nil, "%d outbox events still pending or delivering 10 min after the last job finished", left)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	ch.Figure("outbox drain after the last job finished", time.Since(drainBegin).Round(100*time.Millisecond))
	c.reviveCrashed()
	auditCentral(t, ch, f, rc, c, n)
	ch.Report()
	c.stop()
}

// stop ends every process with SIGTERM and waits for their graceful exit.
func (c *centralCluster) stop() {
	for _, s := range c.slots {
		_ = s.child.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, s := range c.slots {
		waitFor(c.t, 30*time.Second, "graceful exit", s.child.done)
	}
}

// idList is a finding of an audit: the jobs it names and what is wrong.
type idList struct {
	ids  []string
	what string
}

// failEach records every non-empty finding as an audit failure.
func failEach(ch *testsvc.Chaos, lists []idList) {
	for _, x := range lists {
		if len(x.ids) > 0 {
			sort.Strings(x.ids)
			ch.Failf(x.ids, "%s", x.what)
		}
	}
}

// sampleProgress logs, every 10 s, how many jobs are terminal and (on
// SQLite) how large the WAL is, so a run that slows down shows why; the
// largest WAL seen is a figure of the report.
func sampleProgress(t *testing.T, ch *testsvc.Chaos, f *fixture, terminal func() int) func() {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		begin, last, lastAt := time.Now(), terminal(), time.Now()
		var largest int64
		for {
			select {
			case <-done:
				if f.db.Engine == sqldb.SQLite {
					ch.Figure("largest WAL seen (sampled every 10 s)", fmt.Sprintf("%.1f MiB", float64(largest)/(1<<20)))
				}
				return
			case <-time.After(10 * time.Second):
			}
			n, now := terminal(), time.Now()
			wal := int64(-1)
			if f.db.Engine == sqldb.SQLite {
				if st, err := os.Stat(f.db.Path + "-wal"); err == nil {
					wal = st.Size()
					largest = max(largest, wal)
				}
			}
			t.Logf("progress +%s: %d terminal (%.0f/s), WAL %d bytes", now.Sub(begin).Round(time.Second), n,
				float64(n-last)/now.Sub(lastAt).Seconds(), wal)
			last, lastAt = n, now
		}
	}()
	var once sync.Once
	stop := func() { once.Do(func() { close(done); <-stopped }) }
	t.Cleanup(stop) // also when the test stops early
	return stop
}

func countErr(db *sqldb.DB, q string) (int, error) {
	var n int
	err := db.QueryRow(q).Scan(&n)
	return n, err
}

// enqueueChaosJobs inserts n jobs from four writers.
func enqueueChaosJobs(t *testing.T, f *fixture, requester, hookURL string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				j := inbox.NewJob{ID: inbox.NewJobID(), RequesterID: requester, Output: inbox.Output{Bucket: "b", Prefix: "p/" + strconv.Itoa(i) + "/"},
					Renditions: []inbox.Rendition{{Name: "a", Codec: "opus"}}, StatusWebhookURL: hookURL,
					Credentials: credentials.Storage{Output: credentials.S3{AccessKeyID: "a", SecretAccessKey: "s"}}}
				if err := f.jobs.Enqueue(context.Background(), j); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// restartPostgres restarts the private server of scripts/services.sh
// (EUTERPE_CHAOS_PGDATA, its data directory) with pg_ctl: a fast shutdown
// that drops every connection, then a start on the same port.
func restartPostgres(t *testing.T, ch *testsvc.Chaos) bool {
	t.Helper()
	data := os.Getenv("EUTERPE_CHAOS_PGDATA")
	if data == "" {
		ch.Figure("postgres restart", "not injected: EUTERPE_CHAOS_PGDATA unset")
		return false
	}
	// Only the server the tests use, and only when that is the one in
	// data: never a server the user named.
	pid, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	lines := strings.Split(string(pid), "\n")
	if err != nil || len(lines) < 4 || !strings.Contains(testsvc.PostgresURL(), ":"+strings.TrimSpace(lines[3])+"/") {
		ch.Figure("postgres restart", "not injected: the tests' Postgres is not the server in EUTERPE_CHAOS_PGDATA")
		return false
	}
	pgctl := newestPgCtl()
	// -l: the server's output goes to its log, not to a pipe of ours that
	// it would hold open for as long as it runs.
	args := []string{pgctl, "-D", data, "-l", filepath.Join(data, "log"), "-m", "fast", "-w", "-t", "60", "restart"}
	if os.Geteuid() == 0 {
		args = append([]string{"runuser", "-u", "postgres", "--"}, args...)
	}
	// The server outlives this test, so it must not inherit descriptors
	// this process was started with: flock(1)'s lock on the shared heavy-run
	// lock file is one, and the server held it for as long as it ran.
	closeInheritedOnExec()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pg_ctl restart: %v\n%s", err, out)
	}
	return true
}

// closeInheritedOnExec marks every descriptor above stderr close-on-exec
// (Go opens its own that way; the rest came from whoever started us).
func closeInheritedOnExec() {
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, e := range fds {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// killWriteLockHolder finds, in /proc/locks, the serve process holding
// SQLite's WAL write lock (an exclusive POSIX lock on byte 120 of the -shm
// file) and SIGKILLs it while it holds it.
func killWriteLockHolder(t *testing.T, c *centralCluster) *slot {
	t.Helper()
	path := strings.TrimPrefix(c.f.url, "sqlite:") + "-shm"
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	ino := st.Sys().(*syscall.Stat_t).Ino
	suffix := ":" + strconv.FormatUint(ino, 10)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		pids := c.pids()
		fh, err := os.Open("/proc/locks")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			// "1: POSIX  ADVISORY  WRITE 4242 08:01:1234 120 120"
			fs := strings.Fields(sc.Text())
			if len(fs) < 8 || fs[1] != "POSIX" || fs[3] != "WRITE" || !strings.HasSuffix(fs[5], suffix) || fs[6] != "120" {
				continue
			}
			pid, _ := strconv.Atoi(fs[4])
			if s, ok := pids[pid]; ok {
				fh.Close()
				c.kill(s)
				return s
			}
		}
		fh.Close()
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no serve process was seen holding the SQLite write lock within 30 s")
	return nil
}

var terminalStatus = map[string]bool{schema.StatusSucceeded: true, schema.StatusFailed: true, schema.StatusDeadLetter: true}

// auditCentral checks every job and every event against the receiver.
func auditCentral(t *testing.T, ch *testsvc.Chaos, f *fixture, rc *chaosReceiver, c *centralCluster, n int) {
	t.Helper()
	type jobRow struct{ status, code, lastErr string }
	jobsByID := map[string]jobRow{}
	rows, err := f.db.Query(`SELECT id, status, COALESCE(error_code, ''), COALESCE(last_error, '') FROM inbox_jobs`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var r jobRow
		if err := rows.Scan(&id, &r.status, &r.code, &r.lastErr); err != nil {
			t.Fatal(err)
		}
		jobsByID[id] = r
	}
	rows.Close()
	type evRow struct {
		id, status string
		seq        int64
		ev         inbox.Event
	}
	events := map[string][]evRow{}
	rows, err = f.db.Query(`SELECT event_id, job_id, sequence, status, payload FROM job_outbox_events ORDER BY job_id, sequence`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r evRow
		var job, payload string
		if err := rows.Scan(&r.id, &job, &r.seq, &r.status, &payload); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(payload), &r.ev); err != nil {
			t.Fatal(err)
		}
		events[job] = append(events[job], r)
	}
	rows.Close()

	rc.mu.Lock()
	defer rc.mu.Unlock()
	var notTerminal, noReason, twoTerminal, badChain, lost, outOfOrder, phantom, unexpectedDead []string
	var succeeded, failed, deadJobs, evTotal, dead, redelivered int
	known := map[string]bool{}
	for id, j := range jobsByID {
		switch {
		case j.status == schema.StatusSucceeded:
			succeeded++
		case terminalStatus[j.status]:
			if j.code == "" && j.lastErr == "" {
				noReason = append(noReason, id)
			}
			if j.status == schema.StatusFailed {
				failed++
			} else {
				deadJobs++
			}
		default:
			notTerminal = append(notTerminal, id)
		}
		evs := events[id]
		terminals, prev := 0, ""
		for i, r := range evs {
			evTotal++
			known[r.id] = true
			if r.seq != int64(i+1) || (i > 0 && r.ev.PreviousStatus != prev) {
				badChain = append(badChain, id)
			}
			prev = r.ev.Status
			if terminalStatus[r.ev.Status] && r.ev.PreviousStatus != r.ev.Status {
				terminals++
			}
			switch r.status {
			case schema.OutboxDelivered:
				if rc.delivered[r.id] == 0 {
					lost = append(lost, id)
				}
				redelivered += max(rc.delivered[r.id]-1, 0)
			case schema.OutboxDeadLetter:
				dead++
				if !rc.gone[r.id] {
					unexpectedDead = append(unexpectedDead, id)
				}
			default:
				lost = append(lost, id)
			}
		}
		if terminalStatus[j.status] && (terminals != 1 || prev != j.status) {
			twoTerminal = append(twoTerminal, id)
		}
		// Every attempt of the job arrived in sequence order (a retry of
		// an event repeats its sequence, never goes back).
		at := rc.attempts[id]
		for i := 1; i < len(at); i++ {
			if at[i] < at[i-1] {
				outOfOrder = append(outOfOrder, id)
				break
			}
		}
	}
	for id := range rc.delivered {
		if !known[id] {
			phantom = append(phantom, id)
		}
	}
	fenced := 0
	for _, l := range c.logs {
		fenced += strings.Count(l.String(), "is stale")
	}
	if len(jobsByID) != n {
		ch.Failf(nil, "%d jobs in the inbox, %d enqueued", len(jobsByID), n)
	}
	failEach(ch, []idList{
		{notTerminal, "jobs not in a terminal state"},
		{noReason, "failed or dead-lettered jobs without a reason"},
		{dedupe(twoTerminal), "jobs without exactly one terminal event matching their row"},
		{dedupe(badChain), "jobs whose events do not chain (sequence 1, 2, … and previous_status = the status before)"},
		{dedupe(lost), "jobs with events never received (or still pending)"},
		{outOfOrder, "jobs whose events arrived out of sequence order"},
		{phantom, "event ids received that are not in the outbox"},
		{dedupe(unexpectedDead), "jobs with events dead-lettered that the receiver never refused"},
	})
	if rc.badSig > 0 {
		ch.Failf(nil, "%d deliveries failed signature verification", rc.badSig)
	}
	if c.crash > 0 {
		ch.Failf(nil, "%d serve processes exited without being killed", c.crash)
	}
	ch.Figure("jobs", fmt.Sprintf("%d (%d succeeded, %d failed, %d dead-lettered)", len(jobsByID), succeeded, failed, deadJobs))
	ch.Figure("outbox events", evTotal)
	ch.Figure("lost (events never received)", len(dedupe(lost)))
	ch.Figure("duplicated (jobs with two terminal events)", len(dedupe(twoTerminal)))
	ch.Figure("redelivered event_ids (at least once; receivers dedupe)", redelivered)
	ch.Figure("dead-lettered events (gaps, all refused with 410)", dead)
	ch.Figure("fenced writes refused as stale (none changed a row)", fenced)
	ch.Figure("signature failures", rc.badSig)
	ch.Figure("processes that exited on their own", c.crash)
}

func dedupe(ids []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// newestPgCtl is the pg_ctl of the newest server installed beside an initdb
// (a client-only package has neither), chosen by version number: "9.6"
// sorts above "16" as text.
func newestPgCtl() string {
	best, bestVer := "pg_ctl", -1.0
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	for _, b := range bins {
		dir := filepath.Dir(b)
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err != nil {
			continue
		}
		v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
		if err == nil && v > bestVer {
			best, bestVer = b, v
		}
	}
	return best
}
