//go:build chaos

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// fsyncWindow is what appendfsync everysec may lose: Redis fsyncs once a
// second and may postpone a slow fsync by up to one more.
const fsyncWindow = 2 * time.Second

// chaosRedis is a redis-server of the run's own, with AOF on, in a
// directory of its own, restartable on the same port.
type chaosRedis struct {
	t    *testing.T
	port string
	dir  string
	proc *proc
	rdb  *redis.Client
}

func startChaosRedis(t *testing.T) *chaosRedis {
	t.Helper()
	bins["redis-server"] = testsvc.Program(t, "redis-server")
	addr := freeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	r := &chaosRedis{t: t, port: port, dir: t.TempDir()}
	r.rdb = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = r.rdb.Close() })
	r.start()
	return r
}

func (r *chaosRedis) start() {
	r.t.Helper()
	r.proc = startProc(r.t, "redis-server", nil, "--port", r.port, "--bind", "127.0.0.1", "--dir", r.dir,
		"--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--protected-mode", "no")
	require.Eventually(r.t, func() bool { return r.rdb.Ping(context.Background()).Err() == nil },
		30*time.Second, 10*time.Millisecond, "redis-server did not start:\n%s", r.proc.logs.String())
}

func (r *chaosRedis) url() string { return "redis://127.0.0.1:" + r.port + "/0" }

// ack is one job the edge acknowledged with 202.
type ack struct {
	id string
	at time.Time
}

// chaosSubmitter posts jobs to whichever edge answers, retrying a request
// whose answer was lost with the same Idempotency-Key (so a retry is the
// same job, never a second one).
type chaosSubmitter struct {
	mu       sync.Mutex
	acks     map[string]ack // idempotency key -> its 202
	retried  int            // submissions sent again after a lost answer or a 503
	rejected map[string]int // answers that were neither 202 nor 429/503 nor a lost connection, by status and body
}

func (s *chaosSubmitter) post(urls []string, key, task, payload string, pick func(int) int) {
	client := &http.Client{Timeout: 10 * time.Second}
	for try := 0; try < 600; try++ {
		req, _ := http.NewRequest(http.MethodPost, urls[pick(len(urls))]+"/v1/jobs",
			strings.NewReader(fmt.Sprintf(`{"task":%q,"payload":%s}`, task, payload)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", key)
		resp, err := client.Do(req)
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		var body strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			body.WriteString(sc.Text())
		}
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusAccepted:
			s.mu.Lock()
			s.acks[key] = ack{id: jsonField(body.String(), "job_id"), at: time.Now()}
			if try > 0 {
				s.retried++
			}
			s.mu.Unlock()
			return
		case http.StatusTooManyRequests, http.StatusServiceUnavailable:
			time.Sleep(200 * time.Millisecond)
			continue
		default:
			s.mu.Lock()
			s.rejected[fmt.Sprintf("%d %.200s", resp.StatusCode, body.String())]++
			s.mu.Unlock()
			return
		}
	}
}

// jsonField pulls one string field out of a small JSON answer.
func jsonField(body, field string) string {
	_, rest, ok := strings.Cut(body, `"`+field+`":"`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// follow reads a job's SSE stream from random edges, hanging up after a
// random number of events and resuming with Last-Event-ID, until the
// terminal event. It returns every entry id seen, in order.
func follow(ctx context.Context, urls []string, id string, pick func(int) int) ([]string, int) {
	var seen []string
	last, reconnects := "", 0
	client := &http.Client{}
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, urls[pick(len(urls))]+"/v1/jobs/"+id+"/events", nil)
		if last != "" {
			req.Header.Set("Last-Event-ID", last)
		}
		resp, err := client.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			if resp != nil {
				resp.Body.Close()
			}
			time.Sleep(50 * time.Millisecond)
			reconnects++
			continue
		}
		hangUp := 1 + pick(40)
		sc := bufio.NewScanner(resp.Body)
		var frameID, frameType string
		done, n := false, 0
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				frameID = line[4:]
			case strings.HasPrefix(line, "event: "):
				frameType = line[7:]
			case line == "" && frameID != "":
				seen = append(seen, frameID)
				last = frameID
				if jobs.IsTerminal(frameType) {
					done = true
				}
				frameID, frameType = "", ""
				n++
			}
			if done || n >= hangUp {
				break
			}
		}
		resp.Body.Close()
		if done {
			return seen, reconnects
		}
		reconnects++
	}
	return seen, reconnects
}

// The chaos run of the edge: jobs across two euterpe-edge processes on one
// Redis with AOF on (appendfsync everysec), one of them SIGKILLed and
// restarted every 2–5 s, Redis itself SIGKILLed and restarted once, SSE
// clients hanging up and resuming with Last-Event-ID all along. The audit
// finds every acknowledged job finished with exactly one terminal event,
// says exactly which acknowledged jobs Redis lost (only those acknowledged
// inside the fsync window before its kill may be), and checks each SSE
// client saw every event of its job once, in order. Sizes:
// EUTERPE_CHAOS_EDGE_JOBS (default 20,000), EUTERPE_CHAOS_SSE_CLIENTS (50).
func TestChaosEdge(t *testing.T) {
	n := testsvc.ChaosSize(t, "EUTERPE_CHAOS_EDGE_JOBS", 20000)
	nSSE := testsvc.ChaosSize(t, "EUTERPE_CHAOS_SSE_CLIENTS", 50)
	ch := testsvc.NewChaos(t, "edge")
	rs := startChaosRedis(t)
	tool, llm := toolServer(t), llmServer(t, 100, 1)
	var edges []*edge
	var urls []string
	for i := 0; i < 2; i++ {
		e := &edge{t: t, addr: freeAddr(t), state: t.TempDir(), rdb: rs.rdb}
		e.URL = "http://" + e.addr
		e.env = []string{"EUTERPE_REDIS_URL=" + rs.url(), "EUTERPE_EDGE_ADDR=" + e.addr, "EUTERPE_STATE_DIR=" + e.state,
			"EUTERPE_LOG_LEVEL=info", "EUTERPE_WORKERS=16", "EUTERPE_TASK_BACKENDS=tool=http:" + tool + ",chat=llm",
			"EUTERPE_LLM_BASE_URL=" + llm, "EUTERPE_DELTA_BYTES=1", "EUTERPE_CLAIM_IDLE=2s", "EUTERPE_CLAIM_INTERVAL=500ms",
			"EUTERPE_MAX_DELIVERIES=20", "EUTERPE_SSE_HEARTBEAT=1s", "POD_NAME=" + fmt.Sprintf("edge-%d", i)}
		e.start()
		edges = append(edges, e)
		urls = append(urls, e.URL)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := &chaosSubmitter{acks: map[string]ack{}, rejected: map[string]int{}}
	var wg sync.WaitGroup
	const writers = 8
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n && ctx.Err() == nil; i += writers {
				sub.post(urls, fmt.Sprintf("chaos-%d", i), "tool", fmt.Sprintf(`{"n":%d}`, i), ch.Pick)
			}
		}()
	}
	type followed struct {
		key        string
		seen       []string
		reconnects int
	}
	follows := make([]*followed, nSSE)
	for i := range follows {
		f := &followed{key: fmt.Sprintf("sse-%d", i)}
		follows[i] = f
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub.post(urls, f.key, "chat", `{"prompt":"x"}`, ch.Pick)
			sub.mu.Lock()
			a, ok := sub.acks[f.key]
			sub.mu.Unlock()
			if ok {
				f.seen, f.reconnects = follow(ctx, urls, a.id, ch.Pick)
			}
		}()
	}
	submitted := make(chan struct{})
	go func() { wg.Wait(); close(submitted) }()

	// Faults until everything is submitted and followed, and at least
	// three of them; Redis goes down once, as the second fault.
	var redisKilledAt time.Time
	ch.Faults(submitted, func(i int) {
		begin := time.Now()
		if i == 1 {
			redisKilledAt = begin
			rs.proc.kill()
			rs.start()
			ch.Fault("redis SIGKILL + restart", time.Since(begin)+readyAgain(t, urls))
			return
		}
		e := edges[ch.Pick(len(edges))]
		e.proc.kill()
		e.start()
		ch.Fault("edge SIGKILL + restart", time.Since(begin))
	})
	<-submitted

	// Every acknowledged job must end; wait for the ones Redis kept.
	sub.mu.Lock()
	acks := make([]ack, 0, len(sub.acks))
	for _, a := range sub.acks {
		acks = append(acks, a)
	}
	sub.mu.Unlock()
	sort.Slice(acks, func(i, j int) bool { return acks[i].at.Before(acks[j].at) })
	deadline := time.Now().Add(5 * time.Minute)
	var missing, running []string
	for {
		missing, running = missing[:0], running[:0]
		cmds := make([]*redis.StringCmd, len(acks))
		for lo := 0; lo < len(acks); lo += 500 {
			pipe := rs.rdb.Pipeline()
			for i := lo; i < min(lo+500, len(acks)); i++ {
				cmds[i] = pipe.HGet(ctx, jobs.JobKey(acks[i].id), "status")
			}
			_, _ = pipe.Exec(ctx) // redis.Nil for a missing job; other errors below
		}
		for i, c := range cmds {
			if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
				t.Fatalf("audit: read job %s: %v", acks[i].id, err)
			}
			switch st := c.Val(); {
			case st == "":
				missing = append(missing, acks[i].id)
			case !jobs.IsTerminal(st):
				running = append(running, acks[i].id)
			}
		}
		if len(running) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	auditEdge(t, ch, rs, acks, missing, running, redisKilledAt)

	// SSE: each client saw its job's stream once, in order, whatever edge
	// or restart it went through.
	var sseBad []string
	reconnects := 0
	for _, f := range follows {
		reconnects += f.reconnects
		a, ok := sub.acks[f.key]
		if !ok {
			continue
		}
		var want []string
		for _, m := range rs.rdb.XRange(ctx, jobs.EventsKey(a.id), "-", "+").Val() {
			want = append(want, m.ID)
		}
		if strings.Join(f.seen, ",") != strings.Join(want, ",") {
			sseBad = append(sseBad, a.id)
			t.Logf("job %s: SSE saw %d events, the stream has %d", a.id, len(f.seen), len(want))
		}
	}
	if len(sseBad) > 0 {
		ch.Failf(sseBad, "SSE clients that did not see every event exactly once, in order")
	}
	ch.Figure("SSE clients (reconnects with Last-Event-ID)", fmt.Sprintf("%d (%d)", nSSE, reconnects))
	ch.Figure("submissions retried with their Idempotency-Key (lost answer, 503)", sub.retried)
	for answer, k := range sub.rejected {
		ch.Failf(nil, "%d submissions answered %s", k, answer)
	}
	ch.Report()
	for _, e := range edges {
		e.proc.stop(t)
	}
}

// readyAgain waits until every edge answers /ready after a Redis restart.
func readyAgain(t *testing.T, urls []string) time.Duration {
	t.Helper()
	begin := time.Now()
	for _, u := range urls {
		require.Eventually(t, func() bool {
			resp, err := http.Get(u + "/ready")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, 60*time.Second, 20*time.Millisecond, "%s not ready after the Redis restart", u)
	}
	return time.Since(begin)
}

// auditEdge checks every acknowledged job: present (or lost only inside
// the fsync window before the Redis kill), finished, one terminal event,
// an error only with a reason.
func auditEdge(t *testing.T, ch *testsvc.Chaos, rs *chaosRedis, acks []ack, missing, running []string, killedAt time.Time) {
	t.Helper()
	ctx := context.Background()
	ackAt := map[string]time.Time{}
	for _, a := range acks {
		ackAt[a.id] = a.at
	}
	var lostOutside, lostInside []string
	for _, id := range missing {
		if !killedAt.IsZero() && ackAt[id].After(killedAt.Add(-fsyncWindow)) {
			lostInside = append(lostInside, id)
		} else {
			lostOutside = append(lostOutside, id)
		}
	}
	var twoTerminal, noReason []string
	done, failed := 0, 0
	lost := map[string]bool{}
	for _, id := range missing {
		lost[id] = true
	}
	// Read in pipelines of 500 jobs, every error fatal: one pipeline of
	// 20,000 jobs once ran into the client's read timeout, and the jobs it
	// did not read counted as neither done nor failed.
	evs := make([]*redis.XMessageSliceCmd, len(acks))
	hs := make([]*redis.MapStringStringCmd, len(acks))
	for lo := 0; lo < len(acks); lo += 500 {
		pipe := rs.rdb.Pipeline()
		for i := lo; i < min(lo+500, len(acks)); i++ {
			evs[i] = pipe.XRange(ctx, jobs.EventsKey(acks[i].id), "-", "+")
			hs[i] = pipe.HGetAll(ctx, jobs.JobKey(acks[i].id))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("audit: read jobs %d–%d: %v", lo, min(lo+500, len(acks))-1, err)
		}
	}
	var unfinished []string
	for i, a := range acks {
		if lost[a.id] {
			continue
		}
		terminals := 0
		for _, m := range evs[i].Val() {
			if jobs.IsTerminal(jobs.EventFromValues(m.ID, m.Values).Type) {
				terminals++
			}
		}
		h := hs[i].Val()
		if jobs.IsTerminal(h["status"]) && terminals != 1 {
			twoTerminal = append(twoTerminal, a.id)
		}
		switch h["status"] {
		case string(jobs.Done):
			done++
		case string(jobs.Error), string(jobs.Canceled):
			failed++
			if h["error"] == "" && h["error_code"] == "" {
				noReason = append(noReason, a.id)
			}
		default:
			unfinished = append(unfinished, a.id)
		}
	}
	if len(lostOutside) > 0 {
		ch.Failf(lostOutside, "acknowledged jobs lost that were acknowledged before the last fsync window")
	}
	for _, x := range []struct {
		ids  []string
		what string
	}{
		{running, "acknowledged jobs not finished"},
		{unfinished, "acknowledged jobs whose hash is not done, error or canceled at the audit"},
		{twoTerminal, "jobs without exactly one terminal event"},
		{noReason, "failed jobs without a reason"},
	} {
		if len(x.ids) > 0 {
			ch.Failf(x.ids, "%s", x.what)
		}
	}
	if len(lostInside) > 0 {
		sort.Strings(lostInside)
		t.Logf("lost inside the fsync window: %s", strings.Join(lostInside, ", "))
	}
	ch.Figure("jobs acknowledged with 202", fmt.Sprintf("%d (%d done, %d error or canceled)", len(acks), done, failed))
	ch.Figure("lost: acknowledged before the fsync window / inside it", fmt.Sprintf("%d / %d", len(lostOutside), len(lostInside)))
	ch.Figure("duplicated (jobs with two terminal events)", len(twoTerminal))
}

// The chaos run of sync, on each engine: an edge ships the events of jobs
// with many deltas to central while a seeded schedule SIGKILLs the edge
// (mid-batch: it ships without yielding) or central (mid-ingest) every
// 2–5 s and restarts it. Central ends with every event the edge wrote,
// exactly once, in order. Size: EUTERPE_CHAOS_SYNC_JOBS (default 2,000).
func TestChaosSync(t *testing.T) {
	for _, eng := range sqltest.Engines {
		t.Run(string(eng), func(t *testing.T) {
			n := testsvc.ChaosSize(t, "EUTERPE_CHAOS_SYNC_JOBS", 2000)
			ch := testsvc.NewChaos(t, "sync-"+string(eng))
			c := newCentral(t, eng)
			c.start()
			e := newEdge(t, c, "EUTERPE_TASK_BACKENDS=chat=llm", "EUTERPE_LLM_BASE_URL="+llmServer(t, 10, 8),
				"EUTERPE_DELTA_BYTES=1", "EUTERPE_SYNC_YIELD_PACE=0", "EUTERPE_CLAIM_IDLE=2s", "EUTERPE_CLAIM_INTERVAL=500ms")
			e.start()
			sub := &chaosSubmitter{acks: map[string]ack{}, rejected: map[string]int{}}
			submitted := make(chan struct{})
			go func() {
				defer close(submitted)
				for i := 0; i < n; i++ {
					sub.post([]string{e.URL}, fmt.Sprintf("sync-%d", i), "chat", `{"prompt":"x"}`, func(int) int { return 0 })
				}
			}()
			ch.Faults(submitted, func(int) {
				begin := time.Now()
				if ch.Pick(2) == 0 {
					e.proc.kill()
					e.start()
					ch.Fault("edge SIGKILL while shipping", time.Since(begin))
				} else {
					c.proc.kill()
					c.start()
					ch.Fault("central SIGKILL while ingesting", time.Since(begin))
				}
			})
			ids := make([]string, 0, len(sub.acks))
			for _, a := range sub.acks {
				ids = append(ids, a.id)
			}
			waitDone(t, e.rdb, ids, 5*time.Minute)
			want := written(t, e.rdb, ids)
			total := 0
			for _, w := range want {
				total += len(w)
			}
			deadline := time.Now().Add(3 * time.Minute)
			for c.count(`SELECT COUNT(*) FROM edge_events`) < total && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
			stored := c.count(`SELECT COUNT(*) FROM edge_events`)
			distinct := c.count(`SELECT COUNT(DISTINCT event_id) FROM edge_events`)
			ch.Figure("jobs acknowledged with 202", len(ids))
			ch.Figure("events written on the edge / stored on central", fmt.Sprintf("%d / %d", total, stored))
			ch.Figure("lost", max(total-distinct, 0))
			ch.Figure("duplicated", stored-distinct)
			ch.Figure("events central answered as already stored, since its last restart (resent after a kill)", scrape(t, c.URL, `euterpe_sync_events_total{result="duplicate"}`))
			for answer, k := range sub.rejected {
				ch.Failf(nil, "%d submissions answered %s", k, answer)
			}
			if stored != total || distinct != total {
				ch.Failf(nil, "central stored %d events (%d distinct), the edge wrote %d", stored, distinct, total)
			}
			ch.Report()
			checkExactlyOnce(t, c, want)
			e.proc.stop(t)
			c.proc.stop(t)
			c.noSecretLogged(e.proc, c.proc)
		})
	}
}
