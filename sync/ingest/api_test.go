package ingest

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/vesta-cx/euterpe/central/api"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// The operator API: the fleet with heartbeat-derived fields and staleness,
// keyset pages of jobs (status filter, opaque cursor, bad cursor 400), a
// job's events with gaps, and the operator token (a requester key or none
// is refused).
func TestOperatorAPI(t *testing.T) {
	eachEngine(t, func(t *testing.T, url string) {
		s := startServer(t, openURL(t, url))
		edge, secret := s.register("jetson-lab-01")
		idle, _ := s.register("jetson-idle")
		now := time.Now()
		var evs []wire.Event
		for j := range 7 {
			last := "done"
			if j%3 == 0 {
				last = "error"
			}
			evs = append(evs, events(edge, fmt.Sprintf("job-%d", j), 1700000000000+int64(j)*10, "queued", "running", last)...)
		}
		evs[len(evs)-1].Data = json.RawMessage(`{"code":"max_deliveries_exceeded","message":"x"}`)
		if res := s.send(sign(t, wire.Batch{EdgeID: edge, SentAt: now, Events: evs}, secret, now)); res.status != 200 {
			t.Fatalf("batch: %d %s", res.status, res.body)
		}
		st := wire.Status{EdgeID: edge, SentAt: now.Truncate(time.Millisecond), Version: "v1.2.3", Workers: 2, Backlog: 11,
			Spool: wire.SpoolStatus{Events: 40, OldestTS: now.Add(-90 * time.Second).UnixMilli()}}
		hb, _ := wire.EncodeStatus(st)
		if res := s.send(signRaw(t, wire.HeartbeatPath, edge, wire.Compress(hb), secret, now)); res.status != http.StatusNoContent {
			t.Fatalf("heartbeat: %d %s", res.status, res.body)
		}
		var list struct{ Edges []EdgeView }
		if res := s.get("/v1/edges", &list); res.status != 200 || len(list.Edges) != 2 {
			t.Fatalf("list: %d %s", res.status, res.body)
		}
		var got EdgeView
		s.get("/v1/edges/"+edge, &got)
		if got.Name != "jetson-lab-01" || got.Version != "v1.2.3" || got.Stale || got.EventsTotal != 21 || got.Backlog == nil || *got.Backlog != 11 ||
			got.SpoolEvents == nil || *got.SpoolEvents != 40 || got.SpoolOldestAgeS == nil || *got.SpoolOldestAgeS != 90 || got.LastSeenAt == nil {
			t.Fatalf("edge %+v", got)
		}
		var idleView EdgeView
		s.get("/v1/edges/"+idle, &idleView)
		if !idleView.Stale || idleView.LastSeenAt != nil || idleView.Status != nil {
			t.Fatalf("idle edge %+v", idleView)
		}
		if res := s.get("/v1/edges/nope", nil); res.status != 404 {
			t.Fatalf("unknown edge: %d", res.status)
		}

		// Pages of 3, newest first, until next_cursor is absent.
		var seen []string
		cursor := ""
		for range 5 {
			var page struct {
				Jobs       []JobView
				NextCursor string `json:"next_cursor"`
			}
			if res := s.get("/v1/edges/"+edge+"/jobs?limit=3&cursor="+cursor, &page); res.status != 200 {
				t.Fatalf("jobs: %d %s", res.status, res.body)
			}
			for _, j := range page.Jobs {
				seen = append(seen, j.JobID)
			}
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
		if strings.Join(seen, ",") != "job-6,job-5,job-4,job-3,job-2,job-1,job-0" {
			t.Fatalf("pages: %v", seen)
		}
		var errs struct{ Jobs []JobView }
		s.get("/v1/edges/"+edge+"/jobs?status=error", &errs)
		if len(errs.Jobs) != 3 || errs.Jobs[0].JobID != "job-6" || errs.Jobs[0].ErrorCode == nil || *errs.Jobs[0].ErrorCode != "max_deliveries_exceeded" {
			t.Fatalf("error jobs %+v", errs.Jobs)
		}
		for path, code := range map[string]string{
			"/v1/edges/" + edge + "/jobs?cursor=garbage!": "invalid_cursor",
			"/v1/edges/" + edge + "/jobs?cursor=e30":      "invalid_cursor", // {}
			// A job id no edge can send: Postgres text cannot hold NUL.
			"/v1/edges/" + edge + "/jobs?cursor=" + base64.RawURLEncoding.EncodeToString([]byte(`{"j":"\u0000","t":1}`)): "invalid_cursor",
			"/v1/edges/" + edge + "/jobs?status=lost": "invalid_request",
			"/v1/edges/" + edge + "/jobs?limit=0":     "invalid_request",
			"/v1/edges/events?last_event_id=x":        "invalid_last_event_id",
			// Past int64, the place of the entry could not be told.
			"/v1/edges/" + edge + "/jobs/job-2/events?after=9223372036854775808-0": "invalid_request",
		} {
			if res := s.get(path, nil); res.status != 400 || res.code() != code {
				t.Fatalf("%s: %d %s", path, res.status, res.body)
			}
		}
		var jev struct {
			Job    JobView
			Events []EventView
			Gaps   []GapView
		}
		s.get("/v1/edges/"+edge+"/jobs/job-2/events", &jev)
		if jev.Job.Status != "done" || len(jev.Events) != 3 || jev.Events[0].Type != "queued" || jev.Events[2].Type != "done" || jev.Gaps == nil {
			t.Fatalf("job events %+v", jev)
		}
		s.get("/v1/edges/"+edge+"/jobs/job-2/events?after="+jev.Events[0].EntryID, &jev)
		if len(jev.Events) != 2 {
			t.Fatalf("after: %d events", len(jev.Events))
		}
		if res := s.get("/v1/edges/"+edge+"/jobs/ghost/events", nil); res.status != 404 {
			t.Fatalf("unknown job: %d", res.status)
		}
		for _, auth := range []string{"", "Bearer eut_requester_key", "Bearer " + s.token + "x"} {
			req, _ := http.NewRequest(http.MethodGet, s.url+"/v1/edges", nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != 401 {
				t.Fatalf("auth %q: %d", auth, res.StatusCode)
			}
		}
		// Ingest counters.
		if v := counterValue(s.role.Metrics.Batches); v != 1 {
			t.Fatalf("batches %v", v)
		}
		if v := counterValue(s.role.Metrics.Events.WithLabelValues("accepted")); v != 21 {
			t.Fatalf("accepted %v", v)
		}
		s.send(sign(t, wire.Batch{EdgeID: edge, SentAt: now, Events: evs[:1]}, []byte("bad"), now))
		if v := counterValue(s.role.Metrics.Refused.WithLabelValues("unauthorized")); v != 1 {
			t.Fatalf("refused %v", v)
		}
		families, err := s.metrics.Gather()
		names := map[string]bool{}
		for _, f := range families {
			names[f.GetName()] = true
		}
		for _, n := range []string{"euterpe_sync_events_total", "euterpe_sync_refused_total", "euterpe_sync_batches_total", "euterpe_sync_heartbeats_total"} {
			if err != nil || !names[n] {
				t.Fatalf("%s not registered (%v)", n, err)
			}
		}
	})
}

// An older heartbeat delivered late does not replace a newer one.
func TestHeartbeatKeepsNewest(t *testing.T) {
	sqltestEach(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		st := NewStore(db)
		reg, _ := NewRegistry(db, mustKeys(t)).Register(ctx, "e")
		at := time.UnixMilli(1700000000000).UTC()
		for _, h := range []struct {
			sent    time.Time
			version string
		}{{at, "v2"}, {at.Add(-time.Minute), "v1"}} {
			s := wire.Status{EdgeID: reg.EdgeID, SentAt: h.sent, Version: h.version}
			raw, _ := wire.EncodeStatus(s)
			if err := st.Heartbeat(ctx, s, raw); err != nil {
				t.Fatal(err)
			}
		}
		v, err := st.Edge(ctx, reg.EdgeID, time.Minute)
		if err != nil || v.Version != "v2" || v.LastSeenAt == nil || !strings.Contains(string(v.Status), `"v2"`) {
			t.Fatalf("%+v %v", v, err)
		}
	})
}

// Every route the role mounts is in its OpenAPI fragment, every path in
// the fragment is mounted, and the fragment merges into the served
// document.
func TestOpenAPIFragmentCoversRoutes(t *testing.T) {
	var frag struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(openAPI, &frag); err != nil {
		t.Fatal(err)
	}
	r := &Role{Receiver: &Receiver{}, API: &API{Auth: func(next echo.HandlerFunc) echo.HandlerFunc { return next }}}
	e := echo.New()
	r.MountRoutes(e)
	mounted := map[string]bool{}
	for _, rt := range e.Routes() {
		if strings.HasPrefix(rt.Path, "/*") || rt.Method == echo.RouteNotFound {
			continue
		}
		path := rt.Path
		for _, p := range []string{"id", "job_id"} {
			path = strings.ReplaceAll(path, ":"+p, "{"+p+"}")
		}
		key := strings.ToLower(rt.Method) + " " + path
		mounted[key] = true
		if _, ok := frag.Paths[path][strings.ToLower(rt.Method)]; !ok {
			t.Errorf("route %s %s is mounted but not documented", rt.Method, rt.Path)
		}
	}
	for path, ops := range frag.Paths {
		for m := range ops {
			if !mounted[m+" "+path] {
				t.Errorf("%s %s is documented but not mounted", m, path)
			}
		}
	}
	if len(mounted) != 2+len(Routes) {
		t.Fatalf("%d routes mounted", len(mounted))
	}
	if _, err := api.Merge(api.OpenAPI, r.OpenAPI()); err != nil {
		t.Fatal(err)
	}
}

func counterValue(c prometheus.Metric) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

// A heartbeat central cannot store as written (a NUL in its version, which
// Postgres text refuses; invalid UTF-8 in its body) is refused as a bad
// request on both engines, not answered 503 as if central were down.
func TestHeartbeatCentralCannotStoreIsRefused(t *testing.T) {
	eachEngine(t, func(t *testing.T, url string) {
		db := openURL(t, url)
		srv := startServer(t, db)
		edge, secret := srv.register("e")
		for _, tc := range []struct{ name, raw string }{
			{"NUL in version", `{"edge_id":"` + edge + `","sent_at":"2026-01-01T00:00:00Z","version":"v1\u0000x","started_at":"2026-01-01T00:00:00Z","uptime_s":1,"workers":1,"backlog":0,"pending":0,"dead_letters":0,"spool":{"events":0,"bytes":0,"dropped":0,"quarantined":0}}`},
			{"invalid UTF-8", `{"edge_id":"` + edge + `","sent_at":"2026-01-01T00:00:00Z","version":"caf` + "\xe9" + `","started_at":"2026-01-01T00:00:00Z","uptime_s":1,"workers":1,"backlog":0,"pending":0,"dead_letters":0,"spool":{"events":0,"bytes":0,"dropped":0,"quarantined":0}}`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				res := srv.send(signRaw(t, wire.HeartbeatPath, edge, wire.Compress([]byte(tc.raw)), secret, time.Now()))
				if res.status != http.StatusBadRequest || res.code() != wire.CodeInvalidBatch {
					t.Fatalf("answered %d %s, want 400 %s", res.status, res.body, wire.CodeInvalidBatch)
				}
			})
		}
	})
}

// A body that breaks off before its Content-Length is answered 408
// incomplete_body, which the shipper backs off on, not 400 invalid_batch,
// which would set a good batch aside for good.
func TestIncompleteBodyIsNotAnInvalidBatch(t *testing.T) {
	sqltestEach(t, func(t *testing.T, db *sqldb.DB) {
		s := startServer(t, db)
		edge, secret := s.register("jetson-1")
		u := sign(t, wire.Batch{EdgeID: edge, SentAt: time.Now(), Events: events(edge, "j", 1700000000000, "delta")}, secret, time.Now())
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var head strings.Builder
		fmt.Fprintf(&head, "POST %s HTTP/1.1\r\nHost: central\r\nContent-Length: %d\r\n", u.path, len(u.body))
		for k, vs := range u.header {
			for _, v := range vs {
				fmt.Fprintf(&head, "%s: %s\r\n", k, v)
			}
		}
		head.WriteString("\r\n")
		if _, err := conn.Write(append([]byte(head.String()), u.body[:len(u.body)/2]...)); err != nil {
			t.Fatal(err)
		}
		_ = conn.(*net.TCPConn).CloseWrite()
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		r := response{status: res.StatusCode, body: b}
		if r.status != http.StatusRequestTimeout || r.code() != wire.CodeIncompleteBody {
			t.Fatalf("cut body: %d %s, want 408 %s", r.status, b, wire.CodeIncompleteBody)
		}
	})
}

// Every status the receiver refuses a batch or a heartbeat with is in both
// operations' documented answers.
func TestOpenAPIDocumentsEveryRefusal(t *testing.T) {
	src, err := os.ReadFile("handler.go")
	if err != nil {
		t.Fatal(err)
	}
	statuses := map[string]string{}
	for _, m := range regexp.MustCompile(`r\.refuse\(c, edgeID, http\.(Status\w+)`).FindAllStringSubmatch(string(src), -1) {
		statuses[m[1]] = ""
	}
	codes := map[string]int{"StatusUnauthorized": 401, "StatusForbidden": 403, "StatusRequestEntityTooLarge": 413,
		"StatusRequestTimeout": 408, "StatusTooManyRequests": 429, "StatusBadRequest": 400}
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]any `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	if len(statuses) < 5 {
		t.Fatalf("found only %v in handler.go", statuses)
	}
	for name := range statuses {
		code, ok := codes[name]
		if !ok {
			t.Errorf("http.%s: add it to this test's table", name)
			continue
		}
		for _, path := range []string{"/sync/v1/batches", "/sync/v1/heartbeat"} {
			if _, ok := doc.Paths[path]["post"].Responses[strconv.Itoa(code)]; !ok {
				t.Errorf("POST %s: %d (%s) is answered but not documented", path, code, name)
			}
		}
	}
}
