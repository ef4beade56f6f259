package ingest

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// Register, rotate and disable: the secret opens only with its own edge
// and version; during the overlap both secrets verify, after it only the
// new one; a disabled edge is reported disabled; rewrap moves both blobs.
func TestRegisterRotateDisable(t *testing.T) {
	eachEngine(t, func(t *testing.T, url string) {
		ctx := context.Background()
		db := openURL(t, url)
		k1, _ := credentials.ParseKeyring(testKeyring, "")
		r := NewRegistry(db, k1)
		reg, err := r.Register(ctx, "jetson-lab-01")
		if err != nil || !strings.HasPrefix(reg.SyncSecret, SecretPrefix) || reg.EdgeID == "" {
			t.Fatalf("register: %+v %v", reg, err)
		}
		if _, err := r.Register(ctx, "  "); err == nil {
			t.Fatal("registered an edge without a name")
		}
		creds, err := r.CredentialsAt(ctx, reg.EdgeID, time.Now())
		if err != nil || len(creds.Secrets) != 1 || string(creds.Secrets[0]) != reg.SyncSecret || creds.Disabled {
			t.Fatalf("credentials: %d secrets, disabled %v, %v", len(creds.Secrets), creds.Disabled, err)
		}
		// A sealed secret copied to another edge's row does not open there.
		other, _ := r.Register(ctx, "other")
		if _, err := db.Exec(db.Rebind(`UPDATE edges SET secret_encrypted = (SELECT secret_encrypted FROM edges WHERE id = ?),
			secret_dek_wrapped = (SELECT secret_dek_wrapped FROM edges WHERE id = ?) WHERE id = ?`), reg.EdgeID, reg.EdgeID, other.EdgeID); err != nil {
			t.Fatal(err)
		}
		if _, err := r.CredentialsAt(ctx, other.EdgeID, time.Now()); !errors.Is(err, credentials.ErrDecrypt) {
			t.Fatalf("swapped blob opened: %v", err)
		}
		if _, err := db.Exec(db.Rebind(`DELETE FROM edges WHERE id = ?`), other.EdgeID); err != nil {
			t.Fatal(err)
		}

		rot, err := r.RotateSecret(ctx, reg.EdgeID, time.Hour)
		if err != nil || rot.Version != 2 || rot.Secret == reg.SyncSecret {
			t.Fatalf("rotate: %+v %v", rot, err)
		}
		creds, _ = r.CredentialsAt(ctx, reg.EdgeID, time.Now())
		if len(creds.Secrets) != 2 || string(creds.Secrets[0]) != rot.Secret || string(creds.Secrets[1]) != reg.SyncSecret {
			t.Fatalf("during the overlap: %d secrets", len(creds.Secrets))
		}
		creds, _ = r.CredentialsAt(ctx, reg.EdgeID, time.Now().Add(2*time.Hour))
		if len(creds.Secrets) != 1 || string(creds.Secrets[0]) != rot.Secret {
			t.Fatalf("after the overlap: %d secrets", len(creds.Secrets))
		}
		if _, err := r.RotateSecret(ctx, "nope", time.Hour); !errors.Is(err, ErrNotFound) {
			t.Fatalf("rotate unknown: %v", err)
		}

		// Rewrap to a new KEK; the old one can then go.
		k2spec := "k2:" + credentials.NewKey()
		both, _ := credentials.ParseKeyring(k2spec+","+testKeyring, "")
		n, err := NewRegistry(db, both).Rewrap(ctx)
		if err != nil || n != 2 { // current and previous
			t.Fatalf("rewrap: %d %v", n, err)
		}
		onlyK2, _ := credentials.ParseKeyring(k2spec, "")
		creds, err = NewRegistry(db, onlyK2).CredentialsAt(ctx, reg.EdgeID, time.Now())
		if err != nil || len(creds.Secrets) != 2 || string(creds.Secrets[0]) != rot.Secret {
			t.Fatalf("after rewrap: %v", err)
		}

		if err := r.Disable(ctx, reg.EdgeID); err != nil {
			t.Fatal(err)
		}
		if err := r.Disable(ctx, reg.EdgeID); err != nil {
			t.Fatalf("disable twice: %v", err)
		}
		creds, _ = NewRegistry(db, onlyK2).CredentialsAt(ctx, reg.EdgeID, time.Now())
		if !creds.Disabled {
			t.Fatal("disabled edge not reported disabled")
		}
		if err := r.Disable(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("disable unknown: %v", err)
		}
	})
}

// A disabled edge enabled again is let in with its current secret: the
// batch it was refused (403 edge_disabled) is then stored. Enabling an
// enabled edge changes nothing; an unknown one is ErrNotFound.
func TestEnableLetsADisabledEdgeInAgain(t *testing.T) {
	eachEngine(t, func(t *testing.T, url string) {
		ctx := context.Background()
		db := openURL(t, url)
		s := startServer(t, db)
		r := NewRegistry(db, s.keys)
		edge, secret := s.register("jetson-1")
		if err := r.Disable(ctx, edge); err != nil {
			t.Fatal(err)
		}
		b := wire.Batch{EdgeID: edge, SentAt: time.Now(), Events: events(edge, "job-1", 1700000000000, "queued", "running")}
		if res := s.send(sign(t, b, secret, time.Now())); res.status != 403 || res.code() != wire.CodeEdgeDisabled {
			t.Fatalf("disabled: %d %s", res.status, res.body)
		}
		for range 2 { // the second is a no-op
			if err := r.Enable(ctx, edge); err != nil {
				t.Fatal(err)
			}
			creds, err := r.CredentialsAt(ctx, edge, time.Now())
			if err != nil || creds.Disabled || len(creds.Secrets) != 1 {
				t.Fatalf("enabled: disabled %v, %d secrets, %v", creds.Disabled, len(creds.Secrets), err)
			}
		}
		if res := s.send(sign(t, b, secret, time.Now())); res.status != 200 {
			t.Fatalf("enabled: %d %s", res.status, res.body)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM edge_events`); n != 2 {
			t.Fatalf("%d events stored, want 2", n)
		}
		if err := r.Enable(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("enable unknown: %v", err)
		}
	})
}

func bomb(t *testing.T) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	_, _ = zw.Write(make([]byte, 64<<20))
	_ = zw.Close()
	if buf.Len() > wire.MaxCompressedBytes {
		t.Fatalf("bomb is %d bytes compressed", buf.Len())
	}
	return buf.Bytes()
}

// Every refusal answers its status and code, writes nothing, and leaves no
// secret in the log.
func TestRefusalsWriteNothing(t *testing.T) {
	eachEngine(t, func(t *testing.T, url string) {
		db := openURL(t, url)
		s := startServer(t, db)
		edge, secret := s.register("jetson-1")
		disabled, disabledSecret := s.register("jetson-2")
		if err := NewRegistry(db, s.keys).Disable(context.Background(), disabled); err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		good := wire.Batch{EdgeID: edge, SentAt: now, Events: events(edge, "job-1", 1700000000000, "queued", "running")}
		random := make([]byte, wire.MaxCompressedBytes+10)
		_, _ = rand.Read(random)
		replayed := sign(t, good, secret, now)
		if res := s.send(replayed); res.status != 200 {
			t.Fatalf("first send: %d %s", res.status, res.body)
		}
		// newer is v as an edge newer than this central sends it: with a
		// field added in front of at.
		newer := func(path string, v any, at, field string) signed {
			raw, err := json.Marshal(v)
			if err != nil || !bytes.Contains(raw, []byte(at)) {
				t.Fatalf("%s: no %s in %s", err, at, raw)
			}
			raw = bytes.Replace(raw, []byte(at), []byte(field+at), 1)
			return signRaw(t, path, edge, wire.Compress(raw), secret, now)
		}
		next := wire.Batch{EdgeID: edge, SentAt: now, Events: events(edge, "job-2", 1700000000000, "queued")}
		badEntry := next
		badEntry.Events = events(edge, "job-2", 1700000000000, "queued")
		badEntry.Events[0].EntryID = "01-0"
		badEntry.Events[0].EventID = wire.EventID(edge, "job-2", "01-0")
		before := written(t, db)
		for _, tc := range []struct {
			name   string
			req    signed
			status int
			code   string
		}{
			{"bad signature", sign(t, good, []byte("esync_wrong"), now), 401, wire.CodeUnauthorized},
			{"replayed nonce", replayed, 401, wire.CodeUnauthorized},
			{"stale timestamp", sign(t, good, secret, now.Add(-10*time.Minute)), 401, wire.CodeClockSkew},
			{"future timestamp", sign(t, good, secret, now.Add(2*time.Hour)), 401, wire.CodeClockSkew},
			{"oversized body", signRaw(t, wire.BatchPath, edge, random, secret, now), 413, wire.CodeTooLarge},
			{"oversized chunked body", func() signed {
				u := signRaw(t, wire.BatchPath, edge, random, secret, now)
				u.chunked = true
				return u
			}(), 413, wire.CodeTooLarge},
			{"gzip bomb", signRaw(t, wire.BatchPath, edge, bomb(t), secret, now), 413, wire.CodeTooLarge},
			{"unknown edge", sign(t, wire.Batch{EdgeID: "ghost", SentAt: now, Events: events("ghost", "j", 1, "queued")}, secret, now), 401, wire.CodeUnauthorized},
			{"disabled edge", sign(t, wire.Batch{EdgeID: disabled, SentAt: now, Events: events(disabled, "j", 1, "queued")}, disabledSecret, now), 403, wire.CodeEdgeDisabled},
			{"wrong edge in body", func() signed {
				u := sign(t, wire.Batch{EdgeID: disabled, SentAt: now, Events: events(disabled, "j", 1, "queued")}, secret, now)
				u.header.Set(wire.HeaderEdgeID, edge)
				return u
			}(), 400, wire.CodeInvalidBatch},
			{"bad JSON", signRaw(t, wire.BatchPath, edge, wire.Compress([]byte(`{"edge_id":`)), secret, now), 400, wire.CodeInvalidBatch},
			{"not gzip", signRaw(t, wire.BatchPath, edge, []byte("plain"), secret, now), 400, wire.CodeInvalidBatch},
			{"no signature", func() signed {
				u := sign(t, good, secret, now)
				u.header.Del("x-euterpe-signature")
				return u
			}(), 401, wire.CodeUnauthorized},
			{"heartbeat bad signature", signRaw(t, wire.HeartbeatPath, edge, wire.Compress([]byte(`{}`)), []byte("x"), now), 401, wire.CodeUnauthorized},
			{"heartbeat of another edge", func() signed {
				hb, _ := wire.EncodeStatus(wire.Status{EdgeID: disabled, SentAt: now})
				return signRaw(t, wire.HeartbeatPath, edge, wire.Compress(hb), secret, now)
			}(), 400, wire.CodeInvalidBatch},
			{"heartbeat bad JSON", signRaw(t, wire.HeartbeatPath, edge, wire.Compress([]byte(`{"edge_id":1}`)), secret, now), 400, wire.CodeInvalidBatch},
			{"batch from a newer edge", newer(wire.BatchPath, next, `"sent_at":`, `"schema":2,`), 400, wire.CodeUnsupportedFormat},
			{"event from a newer edge", newer(wire.BatchPath, next, `"type":`, `"priority":3,`), 400, wire.CodeUnsupportedFormat},
			{"heartbeat from a newer edge", newer(wire.HeartbeatPath, wire.Status{EdgeID: edge, SentAt: now}, `"version":`, `"gpu":{"temp_c":61},`), 400, wire.CodeUnsupportedFormat},
			{"newer and not JSON after", newer(wire.BatchPath, next, `"sent_at":`, `"schema":2,"x":`), 400, wire.CodeInvalidBatch},
			{"bad event", newer(wire.BatchPath, badEntry, `"sent_at":`, ""), 400, wire.CodeInvalidBatch},
			{"unknown encoding", func() signed {
				u := sign(t, good, secret, now)
				u.header.Set("Content-Encoding", "br")
				return u
			}(), 400, wire.CodeInvalidBatch},
		} {
			t.Run(tc.name, func(t *testing.T) {
				res := s.send(tc.req)
				if res.status != tc.status || res.code() != tc.code {
					t.Fatalf("got %d %s, want %d %s: %s", res.status, res.code(), tc.status, tc.code, res.body)
				}
				if tc.code == wire.CodeClockSkew {
					d, err := http.ParseTime(res.header.Get("Date"))
					if err != nil || time.Until(d).Abs() > 5*time.Second {
						t.Fatalf("Date header %q: %v", res.header.Get("Date"), err)
					}
				}
				if got := written(t, db); got != before {
					t.Fatalf("refusal wrote: %v -> %v", before, got)
				}
			})
		}
		for _, sec := range [][]byte{secret, disabledSecret} {
			if strings.Contains(s.logs.String(), string(sec)) {
				t.Fatal("a sync secret reached the log")
			}
		}
		if !strings.Contains(s.logs.String(), `"code":"clock_skew"`) {
			t.Fatalf("refusals not logged:\n%s", s.logs.String())
		}
	})
}

// A nonce accepted by one central process is refused by another that
// shares the database.
func TestReplayAcrossProcesses(t *testing.T) {
	eachEngine(t, func(t *testing.T, url string) {
		a := startServer(t, openURL(t, url))
		b := startServer(t, openURL(t, url))
		edge, secret := a.register("jetson-1")
		now := time.Now()
		u := sign(t, wire.Batch{EdgeID: edge, SentAt: now, Events: events(edge, "job-1", 1700000000000, "queued")}, secret, now)
		if res := a.send(u); res.status != 200 {
			t.Fatalf("pod a: %d %s", res.status, res.body)
		}
		if res := b.send(u); res.status != 401 || res.code() != wire.CodeUnauthorized {
			t.Fatalf("replay to pod b: %d %s", res.status, res.body)
		}
		// The same request raced to both processes is stored once.
		u = sign(t, wire.Batch{EdgeID: edge, SentAt: now, Events: events(edge, "job-2", 1700000000000, "queued")}, secret, now)
		statuses := make(chan int, 8)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				statuses <- []*server{a, b}[i%2].send(u).status
			}()
		}
		wg.Wait()
		close(statuses)
		got := map[int]int{}
		for st := range statuses {
			got[st]++
		}
		if got[200] != 1 || got[401] != 7 {
			t.Fatalf("raced replays: %v", got)
		}
		// Expired nonces are pruned; a live one is kept.
		n, err := a.role.Nonces.Prune(context.Background(), now.Add(time.Hour), 100)
		if err != nil || n != 2 {
			t.Fatalf("prune: %d %v", n, err)
		}
	})
}

// A resent batch (new signature, same events and gaps) answers 200 and
// changes nothing.
func TestResentBatchIsNoop(t *testing.T) {
	eachEngine(t, func(t *testing.T, url string) {
		db := openURL(t, url)
		s := startServer(t, db)
		edge, secret := s.register("jetson-1")
		b := wire.Batch{EdgeID: edge, SentAt: time.Now(), Events: events(edge, "job-1", 1700000000000, "queued", "running", "delta", "done"),
			Dropped: []wire.Gap{{GapID: wire.GapID(edge, "job-1", "1700000000002-5"), JobID: "job-1", Type: "delta", Count: 7,
				FirstEntryID: "1700000000002-5", LastEntryID: "1700000000002-9", FirstTS: 1700000000002, LastTS: 1700000000002}}}
		var first, again wire.BatchResult
		res := s.send(sign(t, b, secret, time.Now()))
		_ = json.Unmarshal(res.body, &first)
		if res.status != 200 || first != (wire.BatchResult{Accepted: 4, Gaps: 1}) {
			t.Fatalf("first: %d %s", res.status, res.body)
		}
		snap := written(t, db)
		var jobEvents, dropped, total, droppedTotal int
		_ = db.QueryRow(`SELECT events, dropped FROM edge_jobs`).Scan(&jobEvents, &dropped)
		res = s.send(sign(t, b, secret, time.Now()))
		_ = json.Unmarshal(res.body, &again)
		if res.status != 200 || again != (wire.BatchResult{Duplicates: 4}) {
			t.Fatalf("resend: %d %s", res.status, res.body)
		}
		if got := written(t, db); got != snap {
			t.Fatalf("resend wrote rows: %v -> %v", snap, got)
		}
		_ = db.QueryRow(db.Rebind(`SELECT events_total, dropped_total FROM edges WHERE id = ?`), edge).Scan(&total, &droppedTotal)
		var ev2, dr2 int
		_ = db.QueryRow(`SELECT events, dropped FROM edge_jobs`).Scan(&ev2, &dr2)
		if jobEvents != 4 || dropped != 7 || ev2 != 4 || dr2 != 7 || total != 4 || droppedTotal != 7 {
			t.Fatalf("counters: job %d/%d then %d/%d, edge %d/%d", jobEvents, dropped, ev2, dr2, total, droppedTotal)
		}
	})
}

// Overlapping batches sent concurrently by several goroutines to two
// processes store exactly one row per event id, and the counters agree.
func TestConcurrentOverlappingIngest(t *testing.T) {
	eachEngine(t, func(t *testing.T, url string) {
		db := openURL(t, url)
		pods := []*server{startServer(t, db), startServer(t, openURL(t, url))}
		edge, secret := pods[0].register("jetson-1")
		const jobs, perJob = 20, 30
		var all []wire.Event
		for j := range jobs {
			types := []string{"queued", "running"}
			for range perJob - 3 {
				types = append(types, "delta")
			}
			types = append(types, "done")
			all = append(all, events(edge, fmt.Sprintf("job-%02d", j), 1700000000000+int64(j)*1000, types...)...)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for g := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Windows of 150 events sliding by 50: every event is in
				// several batches, sent in a different order per goroutine.
				for start := (g * 50) % len(all); start < len(all); start += 100 {
					end := min(start+150, len(all))
					u := sign(t, wire.Batch{EdgeID: edge, SentAt: time.Now(), Events: all[start:end]}, secret, time.Now())
					if res := pods[g%2].send(u); res.status != 200 {
						errs <- fmt.Errorf("batch %d: %d %s", start, res.status, res.body)
						return
					}
				}
				for start := 0; start < len(all); start += 200 {
					u := sign(t, wire.Batch{EdgeID: edge, SentAt: time.Now(), Events: all[start:min(start+200, len(all))]}, secret, time.Now())
					if res := pods[(g+1)%2].send(u); res.status != 200 {
						errs <- fmt.Errorf("batch %d: %d %s", start, res.status, res.body)
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
		if n := count(t, db, `SELECT COUNT(*) FROM edge_events`); n != len(all) {
			t.Fatalf("%d rows for %d events", n, len(all))
		}
		if n := count(t, db, `SELECT COUNT(DISTINCT event_id) FROM edge_events`); n != len(all) {
			t.Fatalf("%d distinct", n)
		}
		if n := count(t, db, `SELECT COALESCE(SUM(events), 0) FROM edge_jobs`); n != len(all) {
			t.Fatalf("edge_jobs count %d events", n)
		}
		if n := count(t, db, `SELECT events_total FROM edges WHERE id = ?`, edge); n != len(all) {
			t.Fatalf("events_total %d", n)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM edge_jobs WHERE status = 'done' AND finished_ts IS NOT NULL AND started_ts IS NOT NULL`); n != jobs {
			t.Fatalf("%d jobs done", n)
		}
	})
}

// The job summary follows the latest status event by entry order, even
// when batches arrive out of order; an error's code comes from its data;
// gaps add to dropped once.
func TestJobSummary(t *testing.T) {
	sqltestEach(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		st := NewStore(db)
		reg, _ := NewRegistry(db, mustKeys(t)).Register(ctx, "e")
		edge := reg.EdgeID
		ev := func(job, entry, typ string, ts int64, data string) wire.Event {
			e := wire.NewEvent(edge, job, entry, typ, "s", ts, json.RawMessage(data))
			if typ == "queued" {
				e.Task = "embed"
			}
			return e
		}
		gap := func(job, first string, n int64) wire.Gap {
			return wire.Gap{GapID: wire.GapID(edge, job, first), JobID: job, Type: "delta", Count: n, FirstEntryID: first,
				LastEntryID: first, FirstTS: 1500, LastTS: 1600}
		}
		ingest := func(evs []wire.Event, gaps ...wire.Gap) {
			t.Helper()
			if _, err := st.Ingest(ctx, wire.Batch{EdgeID: edge, SentAt: time.Now(), Events: evs, Dropped: gaps}); err != nil {
				t.Fatal(err)
			}
		}
		// The terminal event arrives first, the older ones after it.
		ingest([]wire.Event{ev("a", "3000-0", "error", 3000, `{"code":"backend_timeout","message":"slow"}`)})
		ingest([]wire.Event{ev("a", "1000-0", "queued", 1000, `{}`), ev("a", "2000-0", "running", 2000, `{}`), ev("a", "2500-0", "delta", 2500, `{}`)},
			gap("a", "2400-0", 5))
		ingest(nil, gap("a", "2400-0", 5), gap("a", "2600-0", 2)) // one known, one new
		j, err := st.Job(ctx, edge, "a")
		if err != nil {
			t.Fatal(err)
		}
		want := JobView{EdgeID: edge, JobID: "a", Status: "error", FirstTS: 1000, LastTS: 3000, Events: 4, Dropped: 7}
		if j.Status != want.Status || j.FirstTS != want.FirstTS || j.LastTS != want.LastTS || j.Events != want.Events || j.Dropped != want.Dropped ||
			j.Task == nil || *j.Task != "embed" || j.StartedTS == nil || *j.StartedTS != 2000 || j.FinishedTS == nil || *j.FinishedTS != 3000 ||
			j.TerminalType == nil || *j.TerminalType != "error" || j.ErrorCode == nil || *j.ErrorCode != "backend_timeout" {
			t.Fatalf("summary %+v", j)
		}
		if n := count(t, db, `SELECT dropped_total FROM edges WHERE id = ?`, edge); n != 7 {
			t.Fatalf("dropped_total %d", n)
		}
		// Only deltas so far: running; then queued and canceled.
		ingest([]wire.Event{ev("b", "5000-1", "delta", 5000, `{}`)})
		if j, _ := st.Job(ctx, edge, "b"); j.Status != StatusRunning || j.FinishedTS != nil {
			t.Fatalf("delta-only job %+v", j)
		}
		ingest([]wire.Event{ev("b", "4000-0", "queued", 4000, `{}`)})
		if j, _ := st.Job(ctx, edge, "b"); j.Status != StatusQueued {
			t.Fatalf("queued job %+v", j)
		}
		ingest([]wire.Event{ev("b", "6000-0", "canceled", 6000, `{"reason":"x"}`)})
		if j, _ := st.Job(ctx, edge, "b"); j.Status != StatusCanceled || j.TerminalType == nil || *j.TerminalType != "canceled" || j.ErrorCode != nil {
			t.Fatalf("canceled job %+v", j)
		}
		events, gaps, err := st.JobEvents(ctx, edge, "a", "", 100)
		if err != nil || len(events) != 4 || len(gaps) != 2 || events[0].Type != "queued" || events[3].Type != "error" {
			t.Fatalf("events %d gaps %d %v", len(events), len(gaps), err)
		}
	})
}

// Retention deletes events and gaps received before the cutoff and jobs
// last touched before it, in batches, and keeps the rest.
func TestRetentionPrune(t *testing.T) {
	sqltestEach(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		st := NewStore(db)
		reg, _ := NewRegistry(db, mustKeys(t)).Register(ctx, "e")
		old := time.Now().Add(-40 * 24 * time.Hour)
		st.now = func() time.Time { return old }
		var evs []wire.Event
		for j := range 5 {
			evs = append(evs, events(reg.EdgeID, fmt.Sprintf("old-%d", j), 1000, "queued", "running", "done")...)
		}
		for i := 0; i < len(evs); i += 500 {
			if _, err := st.Ingest(ctx, wire.Batch{EdgeID: reg.EdgeID, SentAt: old, Events: evs[i:min(i+500, len(evs))],
				Dropped: []wire.Gap{{GapID: wire.GapID(reg.EdgeID, "old-0", "1-0"), JobID: "old-0", Type: "delta", Count: 1, FirstEntryID: "1-0", LastEntryID: "1-0", FirstTS: 1, LastTS: 1}}}); err != nil {
				t.Fatal(err)
			}
		}
		st.now = time.Now
		if _, err := st.Ingest(ctx, wire.Batch{EdgeID: reg.EdgeID, SentAt: time.Now(), Events: events(reg.EdgeID, "new", 5000, "queued")}); err != nil {
			t.Fatal(err)
		}
		p, err := st.Prune(ctx, time.Now().Add(-30*24*time.Hour))
		if err != nil || p != (Pruned{Events: 15, Gaps: 1, Jobs: 5}) {
			t.Fatalf("prune: %+v %v", p, err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM edge_events`); n != 1 {
			t.Fatalf("%d events left", n)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM edge_jobs`); n != 1 {
			t.Fatalf("%d jobs left", n)
		}
		if n := count(t, db, `SELECT events_total FROM edges`); n != 16 {
			t.Fatalf("lifetime counter changed: %d", n)
		}
	})
}

func mustKeys(t *testing.T) *credentials.Keyring {
	k, err := credentials.ParseKeyring(testKeyring, "")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sqltestEach(t *testing.T, body func(t *testing.T, db *sqldb.DB)) {
	eachEngine(t, func(t *testing.T, url string) { body(t, openURL(t, url)) })
}

// An error event's code is edge data: whatever it holds, the batch is
// stored (a failing insert would answer 503 and the edge would resend the
// batch, and every batch behind it, forever). Postgres text refuses NUL
// and invalid UTF-8, so the code is cut on a character and cleaned.
func TestErrorCodeAnyTextIsStored(t *testing.T) {
	long := strings.Repeat("a", 127) + "é" + "tail"
	cases := []struct {
		name, data, want string
	}{
		{"plain", `{"code":"backend_timeout"}`, "backend_timeout"},
		{"cut inside a character", `{"code":"` + long + `"}`, strings.Repeat("a", 127)},
		{"escaped NUL", `{"code":"bad\u0000code"}`, "badcode"},
		{"only NUL", `{"code":"\u0000"}`, ""},
	}
	sqltestEach(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		st := NewStore(db)
		reg, _ := NewRegistry(db, mustKeys(t)).Register(ctx, "e")
		for i, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				job := fmt.Sprintf("job-%d", i)
				e := wire.NewEvent(reg.EdgeID, job, "1000-0", "error", "s", 1000, json.RawMessage(c.data))
				b := wire.Batch{EdgeID: reg.EdgeID, SentAt: time.Now(), Events: []wire.Event{e}}
				if _, err := wire.Encode(b); err != nil {
					t.Fatalf("the edge would send it: %v", err)
				}
				if _, err := st.Ingest(ctx, b); err != nil {
					t.Fatalf("ingest: %v", err)
				}
				j, err := st.Job(ctx, reg.EdgeID, job)
				if err != nil {
					t.Fatal(err)
				}
				got := ""
				if j.ErrorCode != nil {
					got = *j.ErrorCode
				}
				if got != c.want || j.Status != StatusError {
					t.Fatalf("error_code %q status %s, want %q error", got, j.Status, c.want)
				}
			})
		}
	})
}
