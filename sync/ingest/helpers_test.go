package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/operators"
	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/central/webhook"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/sync/wire"
)

func migrations() []sqldb.Migrations {
	return []sqldb.Migrations{schema.Migrations(), operators.Migrations(), Migrations()}
}

// eachEngine runs body per engine with a migrated database URL, so a test
// can open the database more than once (two central processes).
func eachEngine(t *testing.T, body func(t *testing.T, url string)) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) {
			url := sqltest.URL(t, e)
			db := openURL(t, url)
			if _, err := sqldb.Migrate(context.Background(), db, migrations()...); err != nil {
				t.Fatal(err)
			}
			body(t, url)
		})
	}
}

func openURL(t testing.TB, url string) *sqldb.DB {
	t.Helper()
	db, err := sqldb.Open(context.Background(), url, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// server is one central process's sync role, served on a loopback port.
type server struct {
	t       testing.TB
	db      *sqldb.DB
	keys    *credentials.Keyring
	role    *Role
	url     string
	logs    *testsvc.LogBuffer
	token   string
	metrics *prometheus.Registry
}

var testKeyring = "k1:" + credentials.NewKey()

func startServer(t testing.TB, db *sqldb.DB, tune ...func(*Settings)) *server {
	t.Helper()
	keys, err := credentials.ParseKeyring(testKeyring, "")
	if err != nil {
		t.Fatal(err)
	}
	logs := &testsvc.LogBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ops := operators.New(db)
	op, err := ops.Create(context.Background(), "ops")
	if err != nil {
		t.Fatal(err)
	}
	d := &serve.Deps{DB: db, Keys: keys, Log: log, Operators: ops, OperatorAuth: operators.Auth(ops), Metrics: prometheus.NewRegistry()}
	s := Settings{Retention: 30 * 24 * time.Hour, PruneInterval: time.Hour, Rate: 10000, Burst: 10000, Skew: webhook.DefaultSkew, StaleAfter: 90 * time.Second}
	for _, f := range tune {
		f(&s)
	}
	role := New(d, s)
	role.API.Poll, role.API.Heartbeat = 50*time.Millisecond, 200*time.Millisecond
	e := daemon.NewEcho(log)
	role.MountRoutes(e)
	ln, err := daemon.Listen("EUTERPE_TEST_ADDR", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = daemon.ServeUntil(ctx, daemon.NewHTTPServer(e), ln, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	return &server{t: t, db: db, keys: keys, role: role, url: "http://" + ln.Addr().String(), logs: logs, token: op.Token, metrics: d.Metrics}
}

// register adds an edge and returns its id and secret.
func (s *server) register(name string) (string, []byte) {
	s.t.Helper()
	reg, err := NewRegistry(s.db, s.keys).Register(context.Background(), name)
	if err != nil {
		s.t.Fatal(err)
	}
	return reg.EdgeID, []byte(reg.SyncSecret)
}

// events builds n events of job on edge, entries starting at ms.
func events(edge, job string, ms int64, types ...string) []wire.Event {
	out := make([]wire.Event, len(types))
	for i, typ := range types {
		entry := fmt.Sprintf("%d-%d", ms+int64(i), 0)
		out[i] = wire.NewEvent(edge, job, entry, typ, "step."+typ, ms+int64(i), json.RawMessage(`{"i":`+fmt.Sprint(i)+`}`))
		out[i].Task = "chat"
	}
	return out
}

// signed is a signed upload, ready to send (or to replay).
type signed struct {
	path    string
	header  http.Header
	body    []byte
	chunked bool // sent without Content-Length
}

// sign gzips the batch and signs it at now.
func sign(t testing.TB, b wire.Batch, secret []byte, now time.Time) signed {
	t.Helper()
	raw, err := wire.Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	return signRaw(t, wire.BatchPath, b.EdgeID, wire.Compress(raw), secret, now)
}

func signRaw(t testing.TB, path, edge string, body, secret []byte, now time.Time) signed {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://x"+path, nil)
	if err := webhook.SetHeaders(req, now, "ev-1", body, secret); err != nil {
		t.Fatal(err)
	}
	req.Header.Set(wire.HeaderEdgeID, edge)
	req.Header.Set("Content-Encoding", "gzip")
	req.Header.Set("Content-Type", "application/json")
	return signed{path: path, header: req.Header, body: body}
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) code() string {
	var e struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.Unmarshal(r.body, &e)
	return e.Error.Code
}

func (s *server) send(u signed) response {
	s.t.Helper()
	return s.sendWith(s.t, http.DefaultClient, u)
}

func (s *server) sendWith(t testing.TB, client *http.Client, u signed) response {
	var body io.Reader = bytes.NewReader(u.body)
	if u.chunked {
		body = io.MultiReader(body) // hides the length: Transfer-Encoding: chunked
	}
	req, _ := http.NewRequest(http.MethodPost, s.url+u.path, body)
	req.Header = u.header.Clone()
	res, err := client.Do(req)
	if err != nil {
		t.Error(err)
		return response{}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: b}
}

// get calls the operator API with the operator token.
func (s *server) get(path string, out any) response {
	s.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if out != nil && res.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, out); err != nil {
			s.t.Fatalf("GET %s: %v: %s", path, err, b)
		}
	}
	return response{status: res.StatusCode, header: res.Header, body: b}
}

func count(t testing.TB, db *sqldb.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(db.Rebind(q), args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// written is everything an ingest writes, to prove a refusal wrote nothing.
func written(t testing.TB, db *sqldb.DB) [4]int {
	return [4]int{
		count(t, db, `SELECT COUNT(*) FROM edge_events`),
		count(t, db, `SELECT COUNT(*) FROM edge_jobs`),
		count(t, db, `SELECT COUNT(*) FROM edge_gaps`),
		count(t, db, `SELECT COUNT(*) FROM edges WHERE last_seen_at IS NOT NULL OR events_total > 0 OR last_status IS NOT NULL`),
	}
}
