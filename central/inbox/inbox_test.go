package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/lease"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

func TestTransitionTable(t *testing.T) {
	allowed := [][2]string{
		{"queued", "claimed"}, {"claimed", "fetching"}, {"fetching", "processing"},
		{"processing", "uploading"}, {"uploading", "succeeded"},
		{"claimed", "queued"}, {"fetching", "queued"}, {"processing", "queued"}, {"uploading", "queued"},
		{"claimed", "failed"}, {"fetching", "failed"}, {"processing", "failed"}, {"uploading", "failed"},
		{"failed", "queued"}, {"failed", "dead_letter"},
	}
	n := 0
	for _, tos := range inbox.Transitions.Allowed {
		n += len(tos)
	}
	if n != len(allowed) {
		t.Fatalf("table has %d moves, contract lists %d", n, len(allowed))
	}
	for _, a := range allowed {
		if err := inbox.Transitions.Check(a[0], a[1]); err != nil {
			t.Errorf("%s -> %s rejected: %v", a[0], a[1], err)
		}
	}
	forbidden := [][2]string{
		{"queued", "succeeded"}, {"queued", "processing"}, {"claimed", "succeeded"}, {"fetching", "uploading"},
		{"succeeded", "queued"}, {"dead_letter", "queued"}, {"succeeded", "failed"}, {"queued", "failed"},
		{"claimed", "dead_letter"}, {"processing", "fetching"}, {"queued", "queued"},
	}
	for _, f := range forbidden {
		err := inbox.Transitions.Check(f[0], f[1])
		var te *lease.TransitionError
		if !errors.As(err, &te) || !errors.Is(err, lease.ErrInvalidTransition) {
			t.Errorf("%s -> %s allowed", f[0], f[1])
			continue
		}
		if !strings.Contains(err.Error(), f[0]) || !strings.Contains(err.Error(), f[1]) {
			t.Errorf("error %q does not name both states", err)
		}
	}
	if !inbox.Guards[[2]string{"failed", "queued"}](4, 5) || inbox.Guards[[2]string{"failed", "queued"}](5, 5) {
		t.Error("failed -> queued guard must hold only while attempt_count < max_attempts")
	}
}

func TestLifecycleEventsAndForbiddenMoves(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		s := inbox.New(db, testKeys(t), inbox.DefaultPolicy())
		req := addRequester(t, db)
		id := enqueue(t, s, req, 1)[0]
		jobs, err := s.Claim(ctx, "w1", 5, time.Minute)
		if err != nil || len(jobs) != 1 {
			t.Fatalf("claim: %v %d", err, len(jobs))
		}
		j := jobs[0]
		if j.Version != 1 || j.Attempt != 1 || j.Status != "claimed" || j.Worker != "w1" {
			t.Fatalf("claim fields: %+v", j.Claim)
		}
		// A forbidden move is rejected, names both states, writes nothing.
		err = s.Advance(ctx, j, "uploading")
		if !errors.Is(err, lease.ErrInvalidTransition) || !strings.Contains(err.Error(), "claimed -> uploading") {
			t.Fatalf("want invalid transition, got %v", err)
		}
		if got := statusOf(t, s, id); got != "claimed" {
			t.Fatalf("status after rejected move: %s", got)
		}
		for _, st := range []string{"fetching", "processing", "uploading"} {
			if err := s.Advance(ctx, j, st); err != nil {
				t.Fatalf("advance %s: %v", st, err)
			}
		}
		outs := []inbox.OutputFile{{Rendition: "hi", Bucket: "out", Key: "p/hi.opus", SizeBytes: 10}}
		if err := s.Succeed(ctx, j, outs); err != nil {
			t.Fatal(err)
		}
		if err := s.Advance(ctx, j, "processing"); !errors.Is(err, lease.ErrInvalidTransition) {
			t.Fatalf("move out of succeeded: %v", err)
		}
		evs := events(t, db, id)
		want := []string{"claimed", "fetching", "processing", "uploading", "succeeded"}
		if len(evs) != len(want) {
			t.Fatalf("events: %+v", evs)
		}
		for i, e := range evs {
			var p inbox.Event
			if err := json.Unmarshal([]byte(e.Payload), &p); err != nil {
				t.Fatal(err)
			}
			if e.Seq != int64(i+1) || p.Sequence != e.Seq || p.Status != want[i] || p.JobID != id || p.EventID == "" {
				t.Errorf("event %d: %+v", i, p)
			}
			var md map[string]string
			if json.Unmarshal(p.Metadata, &md) != nil || md["track"] != "t1" {
				t.Errorf("event %d metadata %s", i, p.Metadata)
			}
			if (p.Outputs != nil) != (want[i] == "succeeded") || p.Error != nil {
				t.Errorf("event %d payload shape: %s", i, e.Payload)
			}
			if e.Status != schema.OutboxSkipped && e.Status != schema.OutboxPending {
				t.Errorf("outbox status %s", e.Status)
			}
		}
		v, err := s.Get(ctx, id)
		if err != nil || v.Status != "succeeded" || len(v.Outputs) == 0 || v.FinishedAt == nil || v.StartedAt == nil {
			t.Fatalf("view: %+v %v", v, err)
		}
	})
}

func TestReclaimAfterExpiryAndStaleWrites(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		clk := newClock()
		s := inbox.New(db, testKeys(t), inbox.DefaultPolicy(), inbox.WithClock(clk.Now))
		req := addRequester(t, db)
		id := enqueue(t, s, req, 1)[0]
		a, _ := s.Claim(ctx, "A", 1, 30*time.Second)
		if len(a) != 1 {
			t.Fatal("A claimed nothing")
		}
		ja := a[0]
		for _, st := range []string{"fetching", "processing"} {
			if err := s.Advance(ctx, ja, st); err != nil {
				t.Fatal(err)
			}
		}
		// Still leased: B gets nothing.
		if b, _ := s.Claim(ctx, "B", 1, 30*time.Second); len(b) != 0 {
			t.Fatal("B claimed a leased job")
		}
		// A heartbeats, then goes silent past the lease.
		clk.Add(20 * time.Second)
		if err := s.Heartbeat(ctx, ja, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		clk.Add(29 * time.Second)
		if b, _ := s.Claim(ctx, "B", 1, 30*time.Second); len(b) != 0 {
			t.Fatal("heartbeat did not extend the lease")
		}
		clk.Add(2 * time.Second)
		// The expired job is requeued with backoff (at least its base)...
		if b, _ := s.Claim(ctx, "B", 1, 30*time.Second); len(b) != 0 {
			t.Fatal("B claimed an expired job before its backoff")
		}
		clk.Add(inbox.DefaultPolicy().Backoff.Cap)
		b, err := s.Claim(ctx, "B", 1, 30*time.Second)
		if err != nil || len(b) != 1 {
			t.Fatalf("B reclaim: %v %d", err, len(b))
		}
		jb := b[0]
		if jb.ID != id || jb.Version <= ja.Version+1-1 || jb.Version == ja.Version || jb.Attempt != 2 {
			t.Fatalf("reclaim must allocate a new claim_version: A %d B %d attempt %d", ja.Version, jb.Version, jb.Attempt)
		}
		// Every write by A is now fenced off with a typed error.
		checks := map[string]error{
			"heartbeat": s.Heartbeat(ctx, ja, time.Minute),
			"advance":   s.Advance(ctx, ja, "uploading"),
		}
		_, checks["refresh count"] = s.CountRefreshAttempt(ctx, ja)
		_, ferr := s.Fail(ctx, ja, inbox.JobError{Class: inbox.Permanent, Code: "x", Message: "y"})
		checks["fail"] = ferr
		for name, err := range checks {
			var se *lease.StaleError
			if !errors.As(err, &se) || !errors.Is(err, lease.ErrStale) {
				t.Errorf("%s by stale worker: %v", name, err)
			}
		}
		if err := s.Advance(ctx, jb, "fetching"); err != nil {
			t.Fatalf("B advance: %v", err)
		}
		var got []string
		for _, e := range events(t, db, id) {
			var p inbox.Event
			_ = json.Unmarshal([]byte(e.Payload), &p)
			got = append(got, p.PreviousStatus+">"+p.Status)
		}
		want := "queued>claimed claimed>fetching fetching>processing processing>queued queued>claimed claimed>fetching"
		if strings.Join(got, " ") != want {
			t.Fatalf("events %v\nwant %s", got, want)
		}
	})
}

func TestRetryPolicy(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		clk := newClock()
		pol := inbox.DefaultPolicy()
		pol.MaxAttempts = 3
		pol.Backoff = lease.Backoff{Base: time.Second, Cap: 4 * time.Second, Rand: func() float64 { return 0.999 }}
		pol.RateLimited = lease.Backoff{Base: time.Minute, Cap: 10 * time.Minute, Rand: func() float64 { return 0 }}
		s := inbox.New(db, testKeys(t), pol, inbox.WithClock(clk.Now))
		req := addRequester(t, db)
		id := enqueue(t, s, req, 1)[0]

		claim := func() *inbox.Job {
			t.Helper()
			js, err := s.Claim(ctx, "w", 1, time.Minute)
			if err != nil || len(js) != 1 {
				t.Fatalf("claim: %v %d", err, len(js))
			}
			return js[0]
		}
		// Attempt 1: 503 -> queued with backoff < 1s.
		j := claim()
		st, err := s.Fail(ctx, j, inbox.JobError{Class: inbox.Retryable, Code: "storage_503", Message: "upstream"})
		if err != nil || st != "queued" {
			t.Fatalf("fail 503: %s %v", st, err)
		}
		v, _ := s.Get(ctx, id)
		if d := v.NextAttemptAt.Sub(s.Now()); d <= 0 || d >= time.Second {
			t.Fatalf("retry delay %s", d)
		}
		if js, _ := s.Claim(ctx, "w", 1, time.Minute); len(js) != 0 {
			t.Fatal("claimed before backoff elapsed")
		}
		clk.Add(time.Second)
		// Attempt 2: 429 -> the larger bucket (>= 1 minute).
		j = claim()
		if st, _ := s.Fail(ctx, j, inbox.JobError{Class: inbox.RateLimited, Code: "rate_limited", Message: "slow"}); st != "queued" {
			t.Fatalf("fail 429: %s", st)
		}
		v, _ = s.Get(ctx, id)
		if d := v.NextAttemptAt.Sub(s.Now()); d < time.Minute {
			t.Fatalf("429 delay %s not in the larger bucket", d)
		}
		clk.Add(time.Hour)
		// Attempt 3 = max: retryable error -> failed -> dead_letter.
		j = claim()
		if j.Attempt != 3 {
			t.Fatalf("attempt %d", j.Attempt)
		}
		st, err = s.Fail(ctx, j, inbox.JobError{Class: inbox.Retryable, Code: "storage_500", Message: strings.Repeat("x", 2000)})
		if err != nil || st != "dead_letter" {
			t.Fatalf("exhausted: %s %v", st, err)
		}
		v, _ = s.Get(ctx, id)
		if v.LastError == nil || v.LastError.Code != "storage_500" || len(v.LastError.Message) != 512 || v.AttemptCount != 3 {
			t.Fatalf("view after dead_letter: %+v", v)
		}
		evs := events(t, db, id)
		last2 := evs[len(evs)-2:]
		for i, want := range []string{"failed", "dead_letter"} {
			var p inbox.Event
			_ = json.Unmarshal([]byte(last2[i].Payload), &p)
			if p.Status != want || p.Error == nil || p.Error.Code != "storage_500" {
				t.Fatalf("terminal event %d: %s", i, last2[i].Payload)
			}
		}
		// Permanent failure of a fresh job: failed, no retry.
		id2 := enqueue(t, s, req, 1)[0]
		j = claim()
		if j.ID != id2 {
			t.Fatal("wrong job")
		}
		if st, _ := s.Fail(ctx, j, inbox.JobError{Class: inbox.Permanent, Code: "bad_media", Message: "no audio"}); st != "failed" {
			t.Fatalf("permanent: %s", st)
		}
	})
}

func TestLeaseExpiryExhaustsToDeadLetter(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		clk := newClock()
		pol := inbox.DefaultPolicy()
		pol.MaxAttempts = 2
		s := inbox.New(db, testKeys(t), pol, inbox.WithClock(clk.Now))
		id := enqueue(t, s, addRequester(t, db), 1)[0]
		for i := 0; i < 2; i++ {
			if js, _ := s.Claim(ctx, "w", 1, time.Second); len(js) != 1 {
				t.Fatalf("claim %d", i)
			}
			clk.Add(2 * time.Second)
			if i == 0 {
				if n, err := s.Queue().Reclaim(ctx, 10); err != nil || n != 1 {
					t.Fatalf("reclaim: %d %v", n, err)
				}
				clk.Add(pol.Backoff.Cap) // the requeue's backoff
			}
		}
		if n, err := s.Queue().Reclaim(ctx, 10); err != nil || n != 1 {
			t.Fatalf("reclaim: %d %v", n, err)
		}
		if st := statusOf(t, s, id); st != "dead_letter" {
			t.Fatalf("status %s", st)
		}
	})
}

// Many workers claim concurrently; every job is claimed by exactly one and
// finished exactly once.
func TestClaimExclusivity(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		s := inbox.New(db, testKeys(t), inbox.DefaultPolicy())
		const jobs = 300
		enqueue(t, s, addRequester(t, db), jobs)
		var mu sync.Mutex
		seen := map[string]string{}
		var wg sync.WaitGroup
		for w := 0; w < 12; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				worker := "w" + string(rune('a'+w))
				for {
					js, err := s.Claim(ctx, worker, 7, time.Minute)
					if err != nil {
						t.Error(err)
						return
					}
					if len(js) == 0 {
						return
					}
					mu.Lock()
					for _, j := range js {
						if prev, dup := seen[j.ID]; dup {
							t.Errorf("job %s claimed by %s and %s", j.ID, prev, worker)
						}
						seen[j.ID] = worker
					}
					mu.Unlock()
					if stale, err := s.SucceedMany(ctx, js, nil); err != nil || len(stale) != 0 {
						t.Errorf("succeed: %v stale %d", err, len(stale))
					}
				}
			}()
		}
		wg.Wait()
		if len(seen) != jobs {
			t.Fatalf("claimed %d of %d", len(seen), jobs)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM inbox_jobs WHERE status = 'succeeded' AND claim_version = 1`); n != jobs {
			t.Fatalf("succeeded once: %d", n)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM job_outbox_events WHERE event_type = 'job.status' AND payload LIKE '%"status":"succeeded"%'`); n != jobs {
			t.Fatalf("succeeded events: %d", n)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM job_outbox_events`); n != jobs*5 {
			t.Fatalf("outbox rows: %d", n)
		}
	})
}

// Workers with short leases that sometimes abandon jobs mid-way: nothing is
// lost and nothing finishes twice.
func TestNoJobLostOrFinishedTwice(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		pol := inbox.DefaultPolicy()
		pol.MaxAttempts = 100
		// Abandoned leases are requeued with backoff: keep it short here.
		pol.Backoff = lease.Backoff{Base: 10 * time.Millisecond, Cap: 50 * time.Millisecond}
		s := inbox.New(db, testKeys(t), pol)
		const jobs = 60
		enqueue(t, s, addRequester(t, db), jobs)
		deadline := time.Now().Add(60 * time.Second)
		var wg sync.WaitGroup
		for w := 0; w < 6; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := 0
				for time.Now().Before(deadline) {
					js, err := s.Claim(ctx, "w", 3, 150*time.Millisecond)
					if err != nil {
						t.Error(err)
						return
					}
					if len(js) == 0 {
						if count(t, db, `SELECT COUNT(*) FROM inbox_jobs WHERE status <> 'succeeded'`) == 0 {
							return
						}
						time.Sleep(20 * time.Millisecond)
						continue
					}
					for _, j := range js {
						n++
						if n%4 == 0 {
							continue // abandon: the lease will expire
						}
						err := s.Advance(ctx, j, "fetching")
						if err == nil && n%5 == 0 {
							time.Sleep(200 * time.Millisecond) // outlive the lease
						}
						for _, st := range []string{"processing", "uploading"} {
							if err == nil {
								err = s.Advance(ctx, j, st)
							}
						}
						if err == nil {
							err = s.Succeed(ctx, j, nil)
						}
						if err != nil && !errors.Is(err, lease.ErrStale) {
							t.Error(err)
						}
					}
				}
			}()
		}
		wg.Wait()
		if n := count(t, db, `SELECT COUNT(*) FROM inbox_jobs WHERE status = 'succeeded'`); n != jobs {
			t.Fatalf("succeeded %d of %d", n, jobs)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM job_outbox_events WHERE payload LIKE '%"status":"succeeded"%'`); n != jobs {
			t.Fatalf("succeeded events %d, want exactly %d", n, jobs)
		}
	})
}

func TestCredentialsSealedToRow(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		keys := testKeys(t)
		s := inbox.New(db, keys, inbox.DefaultPolicy())
		req := addRequester(t, db)
		ids := enqueue(t, s, req, 2)
		// Nothing in the database holds the plaintext secret.
		for _, q := range []string{
			`SELECT COUNT(*) FROM inbox_jobs WHERE storage_creds_encrypted IS NULL OR storage_creds_kek_id <> 'k1'`,
		} {
			if n := count(t, db, q); n != 0 {
				t.Fatalf("%s: %d", q, n)
			}
		}
		js, _ := s.Claim(ctx, "w", 2, time.Minute)
		if len(js) != 2 {
			t.Fatal("claim")
		}
		st, ver, err := s.Credentials(ctx, js[0])
		if err != nil || ver != 1 || st.Output.SecretAccessKey != plantedSecret {
			t.Fatalf("open: %v %d", err, ver)
		}
		// Copy job 0's blob onto job 1: it must not open there.
		_, err = db.Exec(db.Rebind(`UPDATE inbox_jobs SET storage_creds_encrypted = (SELECT storage_creds_encrypted FROM inbox_jobs WHERE id = ?),
			storage_creds_dek_wrapped = (SELECT storage_creds_dek_wrapped FROM inbox_jobs WHERE id = ?) WHERE id = ?`), ids[0], ids[0], ids[1])
		if err != nil {
			t.Fatal(err)
		}
		other := js[0]
		if js[1].ID == ids[1] {
			other = js[1]
		}
		if other.ID != ids[1] {
			other = js[0]
		}
		if _, _, err := s.Credentials(ctx, other); err == nil || strings.Contains(err.Error(), plantedSecret) {
			t.Fatalf("copied blob opened or leaked: %v", err)
		}
		// Refresh advances credential_version; the new blob opens at it.
		j := js[0]
		if j.ID != ids[0] {
			j = js[1]
		}
		st.Output.SessionToken = "new-" + plantedSecret
		if v, err := s.UpdateCredentials(ctx, j.ID, j.RequesterID, st); err != nil || v != 2 {
			t.Fatalf("replace: %d %v", v, err)
		}
		st2, ver, err := s.Credentials(ctx, j)
		if err != nil || ver != 2 || st2.Output.SessionToken != "new-"+plantedSecret {
			t.Fatalf("after refresh: %v %d", err, ver)
		}
		if ok, err := s.CountRefreshAttempt(ctx, j); err != nil || !ok {
			t.Fatalf("refresh count: %v %v", ok, err)
		}
		// Drive to terminal states and check no payload or view holds a secret.
		_, _ = s.SucceedMany(ctx, []*inbox.Job{j}, nil)
		for _, id := range ids {
			v, _ := s.Get(ctx, id)
			b, _ := json.Marshal(v)
			if strings.Contains(string(b), plantedSecret) {
				t.Fatalf("status view leaks: %s", b)
			}
		}
		if n := count(t, db, `SELECT COUNT(*) FROM job_outbox_events WHERE payload LIKE ?`, "%"+plantedSecret+"%"); n != 0 {
			t.Fatalf("%d outbox payloads hold the secret", n)
		}
	})
}
