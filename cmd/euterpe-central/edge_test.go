package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/sync/ingest"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// `edge register` prints {edge_id, name, sync_secret} once on stdout and
// never logs the secret; `edge rotate-secret`, `edge disable` and `edge
// enable` act on an id (unknown: exit 1, one line; enabling an enabled edge
// is a no-op); `keys rewrap` moves edge secrets too.
func TestEdgeCommands(t *testing.T) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) {
			c := newCLI(t, e)
			code, out, errOut := c.run("edge", "register", "--name", "jetson-lab-01")
			if code != 0 {
				t.Fatalf("register: exit %d\n%s", code, errOut)
			}
			var reg ingest.Registered
			if err := json.Unmarshal([]byte(out), &reg); err != nil || reg.EdgeID == "" || reg.Name != "jetson-lab-01" ||
				!strings.HasPrefix(reg.SyncSecret, ingest.SecretPrefix) || len(lines(out)) != 1 {
				t.Fatalf("register output %q: %v", out, err)
			}
			code, out, errOut2 := c.run("edge", "rotate-secret", "--id", reg.EdgeID, "--overlap", "2h")
			var rot struct {
				EdgeID  string `json:"edge_id"`
				Secret  string `json:"sync_secret"`
				Version int    `json:"sync_secret_version"`
				Until   string `json:"previous_secret_valid_until"`
			}
			if code != 0 || json.Unmarshal([]byte(out), &rot) != nil || rot.Version != 2 || rot.Secret == reg.SyncSecret || rot.Until == "" {
				t.Fatalf("rotate-secret: exit %d %q\n%s", code, out, errOut2)
			}
			for _, log := range []string{errOut, errOut2} {
				if strings.Contains(log, reg.SyncSecret) || strings.Contains(log, rot.Secret) {
					t.Fatal("a sync secret reached the log")
				}
			}
			// Rewrap to a new KEK, then only the new KEK is needed.
			k2 := "k2:" + credentials.NewKey()
			c.env["EUTERPE_KEYRING"] = k2 + "," + c.env["EUTERPE_KEYRING"]
			code, out, errOut = c.run("keys", "rewrap")
			if code != 0 || !strings.Contains(out, `"edge_secrets":2`) {
				t.Fatalf("rewrap: exit %d %q\n%s", code, out, errOut)
			}
			db, _ := c.open()
			onlyK2, _ := credentials.ParseKeyring(k2, "")
			creds, err := ingest.NewRegistry(db, onlyK2).CredentialsAt(context.Background(), reg.EdgeID, time.Now())
			if err != nil || len(creds.Secrets) != 2 || string(creds.Secrets[0]) != rot.Secret {
				t.Fatalf("after rewrap: %v", err)
			}
			code, out, errOut = c.run("edge", "disable", "--id", reg.EdgeID)
			if code != 0 || !strings.Contains(out, `"disabled"`) {
				t.Fatalf("disable: exit %d %q\n%s", code, out, errOut)
			}
			creds, _ = ingest.NewRegistry(db, onlyK2).CredentialsAt(context.Background(), reg.EdgeID, time.Now())
			if !creds.Disabled {
				t.Fatal("edge not disabled")
			}
			for i := range 2 { // enabling an enabled edge succeeds and changes nothing
				code, out, errOut = c.run("edge", "enable", "--id", reg.EdgeID)
				if code != 0 || out != `{"edge_id":"`+reg.EdgeID+`","status":"enabled"}`+"\n" || !strings.Contains(errOut, "edge enabled") {
					t.Fatalf("enable %d: exit %d %q\n%s", i+1, code, out, errOut)
				}
				creds, err = ingest.NewRegistry(db, onlyK2).CredentialsAt(context.Background(), reg.EdgeID, time.Now())
				if err != nil || creds.Disabled || len(creds.Secrets) != 2 || string(creds.Secrets[0]) != rot.Secret {
					t.Fatalf("enable %d: disabled %v, %d secrets, %v", i+1, creds.Disabled, len(creds.Secrets), err)
				}
			}
			for _, args := range [][]string{{"edge", "disable", "--id", "nope"}, {"edge", "enable", "--id", "nope"}, {"edge", "rotate-secret", "--id", "nope"}} {
				code, out, errOut = c.run(args...)
				if code != 1 || out != "" || len(lines(errOut)) != 1 || !strings.Contains(errOut, "nope") {
					t.Fatalf("%v: exit %d %q\n%s", args, code, out, errOut)
				}
			}
			for _, args := range [][]string{{"edge", "register"}, {"edge", "disable"}, {"edge", "enable"}, {"edge", "rotate-secret"}} {
				if code, _, errOut = c.run(args...); code != 2 || len(lines(errOut)) != 1 {
					t.Fatalf("%v without its flag: exit %d\n%s", args, code, errOut)
				}
			}
		})
	}
}

// signedBatch gzips and signs b as an edge's shipper would.
func signedBatch(t *testing.T, addr string, b wire.Batch, secret []byte) *http.Request {
	raw, err := wire.Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	body := wire.Compress(raw)
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+wire.BatchPath, bytes.NewReader(body))
	req.Header.Set("Content-Encoding", "gzip")
	req.Header.Set("Content-Type", "application/json")
	if err := wire.Sign(req, time.Now(), b, body, secret); err != nil {
		t.Fatal(err)
	}
	return req
}

// A real euterpe-central is killed with SIGKILL while batches are being
// ingested; a new process gets every batch again. Every event is stored
// exactly once and the job summaries and counters agree with the rows.
func TestSyncIngestSurvivesSIGKILL(t *testing.T) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) {
			f := newFixture(t, e)
			keys, _ := credentials.ParseKeyring(f.keyring, "")
			reg, err := ingest.NewRegistry(f.db, keys).Register(context.Background(), "jetson-crash")
			if err != nil {
				t.Fatal(err)
			}
			const batches, perBatch = 24, 500
			var all []wire.Batch
			for b := range batches {
				var evs []wire.Event
				for i := range perBatch {
					job := fmt.Sprintf("job-%03d", b*5+i/100)
					typ := "delta"
					switch i % 100 {
					case 0:
						typ = "queued"
					case 1:
						typ = "running"
					case 99:
						typ = "done"
					}
					entry := fmt.Sprintf("%d-0", 1700000000000+int64(i))
					evs = append(evs, wire.NewEvent(reg.EdgeID, job, entry, typ, "s", 1700000000000+int64(i), json.RawMessage(`{"n":1}`)))
				}
				all = append(all, wire.Batch{EdgeID: reg.EdgeID, SentAt: time.Now(), Events: evs})
			}
			env := func(pod string) []string {
				return []string{"EUTERPE_DATABASE_URL=" + f.url, "EUTERPE_KEYRING=" + f.keyring, "POD_NAME=" + pod,
					"EUTERPE_CENTRAL_ROLES=api,sync", "EUTERPE_STATE_DIR=" + t.TempDir(), "EUTERPE_SYNC_RATE=0"}
			}
			victim := startChild(t, env("pod-victim"), "serve")
			var addr string
			select {
			case addr = <-victim.addr:
			case <-time.After(20 * time.Second):
				t.Fatal("serve did not start")
			}
			// Four senders race through the batches; the process dies under them.
			var wg sync.WaitGroup
			client := &http.Client{Timeout: 10 * time.Second}
			for w := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; i < batches; i += 4 {
						res, err := client.Do(signedBatch(t, addr, all[i], []byte(reg.SyncSecret)))
						if err != nil {
							return // killed
						}
						res.Body.Close()
					}
				}()
			}
			waitFor(t, 30*time.Second, "ingest under way", func() bool {
				return count(t, f.db, `SELECT COUNT(*) FROM edge_events`) >= 2*perBatch
			})
			if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			<-victim.exited
			before := count(t, f.db, `SELECT COUNT(*) FROM edge_events`)
			if before%perBatch != 0 {
				t.Fatalf("%d rows after the kill: a batch was stored in part", before)
			}
			survivor := startChild(t, env("pod-b"), "serve")
			select {
			case addr = <-survivor.addr:
			case <-time.After(20 * time.Second):
				t.Fatal("second serve did not start")
			}
			accepted, duplicates := 0, 0
			for _, b := range all {
				res, err := client.Do(signedBatch(t, addr, b, []byte(reg.SyncSecret)))
				if err != nil {
					t.Fatal(err)
				}
				var r wire.BatchResult
				_ = json.NewDecoder(res.Body).Decode(&r)
				res.Body.Close()
				if res.StatusCode != 200 {
					t.Fatalf("resend: %d", res.StatusCode)
				}
				accepted += r.Accepted
				duplicates += r.Duplicates
			}
			total := batches * perBatch
			if accepted != total-before || duplicates != before {
				t.Fatalf("resend: %d accepted, %d duplicates; %d were stored before", accepted, duplicates, before)
			}
			for q, want := range map[string]int{
				`SELECT COUNT(*) FROM edge_events`:                                   total,
				`SELECT COUNT(DISTINCT event_id) FROM edge_events`:                   total,
				`SELECT COALESCE(SUM(events), 0) FROM edge_jobs`:                     total,
				`SELECT events_total FROM edges`:                                     total,
				`SELECT COUNT(*) FROM edge_jobs WHERE status = 'done'`:               batches * 5,
				`SELECT COUNT(*) FROM edge_jobs WHERE started_ts IS NOT NULL`:        batches * 5,
				`SELECT COUNT(*) FROM edge_events WHERE job_id = 'job-000'`:          100,
				`SELECT COUNT(*) FROM edge_jobs WHERE events <> 100 OR dropped <> 0`: 0,
			} {
				if n := count(t, f.db, q); n != want {
					t.Fatalf("%s = %d, want %d", q, n, want)
				}
			}
			if strings.Contains(survivor.logs.String(), reg.SyncSecret) || strings.Contains(victim.logs.String(), reg.SyncSecret) {
				t.Fatal("the sync secret reached a log")
			}
			_ = survivor.cmd.Process.Signal(syscall.SIGTERM)
			waitFor(t, 15*time.Second, "graceful exit", survivor.done)
		})
	}
}
