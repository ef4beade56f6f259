package serve_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/outbox"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// wakeDeadline is how soon after its commit an event must reach the
// receiver. The dispatcher's poll interval in these tests is one minute, so
// only a wake-up can deliver within it; it takes milliseconds, and the rest
// is room for a busy machine.
const wakeDeadline = 15 * time.Second

// jobHook records the job ids of the webhooks it receives and answers 204.
type jobHook struct {
	*httptest.Server
	mu   sync.Mutex
	seen map[string]time.Time
}

func newJobHook(t *testing.T) *jobHook {
	h := &jobHook{seen: map[string]time.Time{}}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var ev struct {
			JobID string `json:"job_id"`
		}
		_ = json.Unmarshal(body, &ev)
		h.mu.Lock()
		if _, ok := h.seen[ev.JobID]; !ok {
			h.seen[ev.JobID] = time.Now()
		}
		h.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(h.Close)
	return h
}

func (h *jobHook) at(jobID string) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	at, ok := h.seen[jobID]
	return at, ok
}

// enqueue enqueues a job whose status webhook is url (no event yet: the
// first one is written by the claim) and returns its id.
func enqueue(t *testing.T, s *inbox.Store, requester, url string) string {
	t.Helper()
	id := inbox.NewJobID()
	err := s.Enqueue(context.Background(), inbox.NewJob{ID: id, RequesterID: requester,
		Source:           inbox.Source{URL: "https://storage.example.com/a.wav"},
		Output:           inbox.Output{Bucket: "b", Prefix: "p/"},
		Renditions:       []inbox.Rendition{{Name: "a", Codec: "opus"}},
		StatusWebhookURL: url,
		Credentials:      credentials.Storage{Output: credentials.S3{AccessKeyID: "a", SecretAccessKey: "s"}}})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// claimEvent writes one outbox event through s: it enqueues a job and
// claims it (queued → claimed records the event in the claim's commit). It
// returns the job id and when the commit returned.
func claimEvent(t *testing.T, s *inbox.Store, requester, url string) (string, time.Time) {
	t.Helper()
	id := enqueue(t, s, requester, url)
	jobs, err := s.Claim(context.Background(), "test-worker", 1, time.Minute)
	if err != nil || len(jobs) != 1 || jobs[0].ID != id {
		t.Fatalf("claim: %v (%d jobs)", err, len(jobs))
	}
	return id, time.Now()
}

// TestDispatcherWakesOnNewEvents runs serve (api + dispatcher) on each
// engine with the dispatcher's poll interval at one minute. A first event,
// committed before serve starts, is delivered by the first poll; after that
// the next poll is a minute away, and events committed through the inbox
// must reach the receiver within wakeDeadline:
//   - through serve's own inbox store: the in-process wake-up serve wires
//     (Inbox.OnEvents → Wake), plus the engine's watch;
//   - through a second database handle, as another pod would write: only
//     the engine's watch sees it — LISTEN/NOTIFY from the insert trigger on
//     Postgres, PRAGMA data_version on SQLite.
//
// Without a wake-up the events would wait for the next poll and the test
// fails.
func TestDispatcherWakesOnNewEvents(t *testing.T) {
	for _, engine := range sqltest.Engines {
		t.Run(string(engine), func(t *testing.T) {
			hook := newJobHook(t)
			env := serveEnv(t, engine, map[string]string{
				"EUTERPE_CENTRAL_ROLES":         "api,dispatcher",
				"EUTERPE_OUTBOX_POLL_MIN":       "1m",
				"EUTERPE_OUTBOX_POLL_MAX":       "1m",
				"EUTERPE_WEBHOOK_ALLOW_PRIVATE": "true",
			})
			app := serve.NewApp()
			app.Register(outbox.Definition())
			app.AddMigrations(outbox.Migrations())

			// Before serve starts, another handle (as another pod would)
			// migrates the database and commits a first event, which the
			// dispatcher's first poll at start delivers.
			ctx := context.Background()
			other, err := sqldb.Open(ctx, env["EUTERPE_DATABASE_URL"], "")
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			if _, err := sqldb.Migrate(ctx, other, app.Migrations()...); err != nil {
				t.Fatal(err)
			}
			keys, err := credentials.ParseKeyring(env["EUTERPE_KEYRING"], "")
			if err != nil {
				t.Fatal(err)
			}
			req, err := requesters.New(other, keys).Create(ctx, "wake")
			if err != nil {
				t.Fatal(err)
			}
			otherInbox := inbox.New(other, keys, inbox.DefaultPolicy())
			first, _ := claimEvent(t, otherInbox, req.RequesterID, hook.URL)

			st := startServe(t, app, env, nil)
			d := st.deps
			st.waitFor(t, "the first poll to deliver the first event", func() bool { _, ok := hook.at(first); return ok })

			for _, path := range []struct {
				name  string
				store *inbox.Store
			}{
				{"serve's inbox store", d.Inbox},
				{"another database handle", otherInbox},
			} {
				// Let the claims that follow a delivery (freed slot, Wake
				// after delivered) run, so the next claim needs a wake-up.
				time.Sleep(300 * time.Millisecond)
				id, committed := claimEvent(t, path.store, req.RequesterID, hook.URL)
				deadline := committed.Add(wakeDeadline)
				for {
					if at, ok := hook.at(id); ok {
						t.Logf("%s: delivered %s after commit", path.name, at.Sub(committed).Round(time.Millisecond))
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: event not delivered within %s of its commit (poll interval 1m: no wake-up)\n%s",
							path.name, wakeDeadline, st.logs.String())
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
}

// waker is a role that counts Wake calls.
type waker struct{ wakes atomic.Int32 }

func (*waker) Name() string { return "waker" }
func (*waker) Run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
func (w *waker) Wake() { w.wakes.Add(1) }

// TestServeWiresWakeToInboxCommits: a role with a Wake method is woken by
// serve after every inbox commit that wrote outbox events (before the
// commit's caller gets control back), and not by reads or by an enqueue,
// which writes no event.
func TestServeWiresWakeToInboxCommits(t *testing.T) {
	for _, engine := range sqltest.Engines {
		t.Run(string(engine), func(t *testing.T) {
			w := &waker{}
			app := serve.NewApp()
			app.Register(serve.Definition{Name: "waker", New: func(*serve.Deps) (serve.Role, error) { return w, nil }})
			st := startServe(t, app, serveEnv(t, engine, map[string]string{"EUTERPE_CENTRAL_ROLES": "api,waker"}), nil)
			d, ctx := st.deps, context.Background()
			req, err := d.Requesters.Create(ctx, "waker")
			if err != nil {
				t.Fatal(err)
			}
			if n := w.wakes.Load(); n != 0 {
				t.Fatalf("%d wakes before any event", n)
			}
			id := enqueue(t, d.Inbox, req.RequesterID, "https://hooks.example.com/h")
			if n := w.wakes.Load(); n != 0 {
				t.Fatalf("%d wakes after an enqueue (which writes no event)", n)
			}
			if _, err := d.Inbox.Get(ctx, id); err != nil {
				t.Fatal(err)
			}
			jobs, err := d.Inbox.Claim(ctx, "w", 1, time.Minute)
			if err != nil || len(jobs) != 1 {
				t.Fatalf("claim: %v %d", err, len(jobs))
			}
			if n := w.wakes.Load(); n != 1 {
				t.Fatalf("%d wakes after the claim's event, want 1", n)
			}
			if err := d.Inbox.Advance(ctx, jobs[0], schema.StatusFetching); err != nil {
				t.Fatal(err)
			}
			if n := w.wakes.Load(); n != 2 {
				t.Fatalf("%d wakes after claim and advance, want 2", n)
			}
			// A claim that takes no job but moves an expired lease back
			// (its requeue event; the job waits out its backoff) wakes too.
			if _, err := d.DB.ExecContext(ctx, d.DB.Rebind(`UPDATE inbox_jobs SET lease_expires_at = ? WHERE id = ?`),
				sqldb.Micros(time.Now().Add(-time.Hour)), id); err != nil {
				t.Fatal(err)
			}
			if jobs, err := d.Inbox.Claim(ctx, "w", 1, time.Minute); err != nil || len(jobs) != 0 {
				t.Fatalf("claim after the lease expired: %v %d (want the job to wait out its backoff)", err, len(jobs))
			}
			if n := w.wakes.Load(); n != 3 {
				t.Fatalf("%d wakes after a claim that only reclaimed an expired lease, want 3", n)
			}
		})
	}
}
