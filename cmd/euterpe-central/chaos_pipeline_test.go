//go:build chaos

package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/pipeline"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// The chaos run of the pipeline queue: jobs of an exec job type (a stage
// that takes 0.1–0.5 s, then stores its result) go through three
// `euterpe-central serve` processes with the pipeline role, while the
// shared fault loop SIGKILLs one every 2–5 s, preferring one that is
// mid-stage, and restarts it under the same pod name. Then every job is
// audited against pipeline-queue-contract.md: terminal with a reason, its
// attempts counted, no attempt delivered twice, its success written once
// and from its last attempt, its result stored, and the DLQ listing the
// dead letters. Sizes: EUTERPE_CHAOS_PIPELINE_JOBS (default 1,000 per
// engine).
func TestChaosPipeline(t *testing.T) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) { pipelineChaos(t, e) })
	}
}

const pipelineVisibility = 2 * time.Second

// chaosStage is the exec job type. Its symbol says how it behaves:
// EMPTY-… answers UPSTREAM_EMPTY (final: failed), DOOMED-… answers
// STORAGE_WRITE_FAILED every time (retried until the DLQ), FLAKY-… answers
// it at attempt 1 only, OK-… succeeds. Every run is written to the ledger
// ("start JOB ATTEMPT", "stored JOB ATTEMPT"); the result is stored as a
// file of the job id, written whole by rename, so a repeated run stores the
// same bytes (contract §7: storage remains deduplicated).
const chaosStage = `#!/bin/bash
in=$(cat)
id=$(printf '%s' "$in" | sed -n 's/.*"job_id":"\([^"]*\)".*/\1/p')
sym=$(printf '%s' "$in" | sed -n 's/.*"symbol":"\([^"]*\)".*/\1/p')
att=$(printf '%s' "$in" | sed -n 's/.*"attempt":\([0-9]*\).*/\1/p')
# A worker killed before it wrote the message leaves its stage no input.
[ -n "$id" ] && [ -n "$att" ] || exit 2
echo "start $id $att" >>"$EUTERPE_CHAOS_STAGE_DIR/ledger"
sleep "0.$((RANDOM % 5 + 1))"
case "$sym" in
EMPTY-*) echo '{"error_code":"UPSTREAM_EMPTY","error_message":"no rows"}'; exit 0 ;;
DOOMED-*) echo '{"error_code":"STORAGE_WRITE_FAILED","error_message":"disk full"}'; exit 0 ;;
FLAKY-*) if [ "$att" = 1 ]; then echo '{"error_code":"STORAGE_WRITE_FAILED","error_message":"flaky"}'; exit 0; fi ;;
esac
out="$EUTERPE_CHAOS_STAGE_DIR/results"
printf '%s\n' "$id" >"$out/.$id.$$" && mv "$out/.$id.$$" "$out/$id"
echo "stored $id $att" >>"$EUTERPE_CHAOS_STAGE_DIR/ledger"
printf '{"result_ref":"chaos/%s"}\n' "$id"
`

// chaosSymbol spreads the behaviours: 2 % final failures, 2 % dead
// letters, 10 % one retried failure, the rest plain successes.
func chaosSymbol(i int) string {
	switch {
	case i%50 == 0:
		return "EMPTY-" + strconv.Itoa(i)
	case i%50 == 1:
		return "DOOMED-" + strconv.Itoa(i)
	case i%10 == 2:
		return "FLAKY-" + strconv.Itoa(i)
	}
	return "OK-" + strconv.Itoa(i)
}

func pipelineChaos(t *testing.T, e sqldb.Engine) {
	n := testsvc.ChaosSize(t, "EUTERPE_CHAOS_PIPELINE_JOBS", 1000)
	ch := testsvc.NewChaos(t, "pipeline-"+string(e))
	f := newFixture(t, e)
	ctx := context.Background()

	dir := t.TempDir()
	script := filepath.Join(dir, "chaos-stage")
	// The stage sees none of central's environment (pipeline.ExecEnv):
	// its directory is written into the script.
	stage := strings.ReplaceAll(chaosStage, "$EUTERPE_CHAOS_STAGE_DIR", dir)
	if err := os.WriteFile(script, []byte(stage), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "results"), 0o755); err != nil {
		t.Fatal(err)
	}
	store := pipeline.NewStore(f.db, nil)
	ids := map[string]string{} // job id -> symbol
	for i := 0; i < n; i++ {
		c, err := store.Submit(ctx, pipeline.Request{JobType: "chaos", Symbol: chaosSymbol(i), Asof: "2026-01-02", RequestedBy: "chaos"})
		if err != nil || !c.Created {
			t.Fatalf("submit %d: %+v %v", i, c, err)
		}
		ids[c.JobID] = chaosSymbol(i)
	}

	c := &centralCluster{t: t, f: f, env: func(pod string) []string {
		return []string{"EUTERPE_DATABASE_URL=" + f.url, "EUTERPE_KEYRING=" + f.keyring, "POD_NAME=" + pod,
			"EUTERPE_CENTRAL_ROLES=api,pipeline", "EUTERPE_PIPELINE_TYPES=chaos=exec:" + script,
			"EUTERPE_PIPELINE_VISIBILITY=" + pipelineVisibility.String(), "EUTERPE_PIPELINE_CONCURRENCY=8",
			"EUTERPE_PIPELINE_POLL=50ms", "EUTERPE_PIPELINE_BACKOFF_BASE=50ms", "EUTERPE_PIPELINE_BACKOFF_MAX=500ms",
			"EUTERPE_PIPELINE_CATCHUP_DAYS=1", "EUTERPE_LOG_LEVEL=info",
			"EUTERPE_STATE_DIR=" + t.TempDir()}
	}}
	c.startPods(3)

	terminal := func() int {
		n, _ := countErr(f.db, `SELECT COUNT(*) FROM pipeline_jobs WHERE status IN ('succeeded','failed','dead_letter')`)
		return n
	}
	stopSampler := sampleProgress(t, ch, f, terminal)
	done := make(chan struct{})
	watchDone := make(chan struct{})
	// Generous: each stage is a bash process, and the full run shares two
	// cores with the edge and sync scenarios (SQLite ran at 5 jobs/s).
	deadline := time.Now().Add(time.Duration(n)*400*time.Millisecond + 5*time.Minute)
	go func() {
		defer close(watchDone)
		for terminal() < n && time.Now().Before(deadline) {
			time.Sleep(200 * time.Millisecond)
		}
		close(done)
	}()
	// The victim is a process with a job mid-stage when there is one.
	ch.Faults(done, func(int) {
		c.reviveCrashed()
		victim := c.slots[ch.Pick(len(c.slots))]
		var busy []*slot
		rows, err := f.db.Query(`SELECT DISTINCT worker_id FROM pipeline_jobs WHERE status = 'running'`)
		if err == nil {
			for rows.Next() {
				var w string
				if rows.Scan(&w) == nil {
					for _, s := range c.slots {
						if s.pod == w {
							busy = append(busy, s)
						}
					}
				}
			}
			rows.Close()
		}
		if len(busy) > 0 {
			sort.Slice(busy, func(i, j int) bool { return busy[i].pod < busy[j].pod })
			victim = busy[ch.Pick(len(busy))]
		}
		at := time.Now()
		c.kill(victim)
		ready := c.start(victim)
		kind := "SIGKILL + restart"
		if len(busy) > 0 {
			kind = "SIGKILL mid-stage + restart"
		}
		ch.Fault(kind, max(ready, time.Since(at)))
	})
	<-watchDone
	stopSampler()
	if left := n - terminal(); left > 0 {
		ch.Failf(nil, "jobs still queued or running at the deadline: %d of %d", left, n)
	}
	c.reviveCrashed()
	// The workers stop before the audit, so what it reads holds still (after
	// a missed deadline they would go on finishing jobs between its reads of
	// the ledger and of the rows). A stage whose worker was killed runs on as
	// an orphan for up to half a second (its process group is killed only by
	// a live worker): let it finish too.
	c.stop()
	time.Sleep(time.Second)
	auditPipeline(t, ch, f, store, c, dir, ids)
	ch.Report()
}

// auditPipeline checks every job against the contract, the ledger of
// stage runs and the processes' logs.
func auditPipeline(t *testing.T, ch *testsvc.Chaos, f *fixture, store *pipeline.Store, c *centralCluster, dir string, ids map[string]string) {
	t.Helper()
	ctx := context.Background()
	started := map[string]map[int]int{} // job -> attempt -> runs started
	stored := map[string]map[int]bool{} // job -> attempts that stored a result
	fh, err := os.Open(filepath.Join(dir, "ledger"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			ch.Failf(nil, "ledger line %q", sc.Text())
			continue
		}
		att, _ := strconv.Atoi(fs[2])
		switch fs[0] {
		case "start":
			if started[fs[1]] == nil {
				started[fs[1]] = map[int]int{}
			}
			started[fs[1]][att]++
		case "stored":
			if stored[fs[1]] == nil {
				stored[fs[1]] = map[int]bool{}
			}
			stored[fs[1]][att] = true
		}
	}
	fh.Close()

	// Successes and fenced writes, from the processes' logs (a killed
	// process may have committed without logging: the log is a lower bound,
	// so only a second success line is a finding).
	successes := map[string]int{}
	fenced := 0
	for _, l := range c.logs {
		for _, line := range strings.Split(l.String(), "\n") {
			if strings.Contains(line, `"msg":"pipeline job succeeded"`) {
				if i := strings.Index(line, `"job_id":"`); i >= 0 {
					rest := line[i+len(`"job_id":"`):]
					successes[rest[:strings.IndexByte(rest, '"')]]++
				}
			}
			if strings.Contains(line, "lease lost") || strings.Contains(line, "is stale") {
				fenced++
			}
		}
	}

	var noReason, badAttempts, twice, notLast, noResult, twoSuccesses, wrongEnd, dlqMismatch []string
	var succeeded, failed, dead, deadByKills, redelivered int
	deadIDs := map[string]bool{}
	for id, sym := range ids {
		j, err := store.GetByID(ctx, id)
		if err != nil {
			t.Fatalf("job %s: %v", id, err)
		}
		runs := started[id]
		for att, k := range runs {
			if k > 1 {
				twice = append(twice, id)
			}
			if att < 1 || att > j.Attempts {
				badAttempts = append(badAttempts, id)
			}
		}
		redelivered += max(len(runs)-1, 0)
		if successes[id] > 1 {
			twoSuccesses = append(twoSuccesses, id)
		}
		kind, _, _ := strings.Cut(sym, "-")
		switch j.Status {
		case pipeline.StatusSucceeded:
			succeeded++
			if kind == "EMPTY" || kind == "DOOMED" {
				wrongEnd = append(wrongEnd, id)
			}
			// The recorded success is the last attempt's: an earlier
			// attempt's run is fenced out by its lost lease.
			if !stored[id][j.Attempts] || j.ResultRef != "chaos/"+id {
				notLast = append(notLast, id)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "results", id)); err != nil || string(b) != id+"\n" {
				noResult = append(noResult, id)
			}
		case pipeline.StatusFailed, pipeline.StatusDeadLetter:
			if j.LastError == nil || j.LastError.ErrorCode == "" || j.LastError.Attempt < 1 || j.LastError.Attempt > j.Attempts {
				noReason = append(noReason, id)
				break
			}
			code := j.LastError.ErrorCode
			if j.Status == pipeline.StatusFailed {
				failed++
				// Final (not retried) failures only, at the last attempt.
				if code != pipeline.CodeUpstreamEmpty || kind != "EMPTY" || j.LastError.Attempt != j.Attempts {
					wrongEnd = append(wrongEnd, id)
				}
				break
			}
			dead++
			deadIDs[id] = true
			// A dead letter used its whole budget on retried failures:
			// DOOMED's storage failures, or kills of every attempt.
			if j.Attempts != j.MaxAttempts {
				badAttempts = append(badAttempts, id)
			}
			switch {
			case code == pipeline.CodeVisibilityTimeout:
				deadByKills++
			case code == pipeline.CodeStorageWriteFailed && (kind == "DOOMED" || kind == "FLAKY"):
			default:
				wrongEnd = append(wrongEnd, id)
			}
		default:
			wrongEnd = append(wrongEnd, id)
		}
	}
	// The DLQ (the API's listing of dead letters, and the dlq_size gauge's
	// count) agrees with the rows.
	listed := map[string]bool{}
	for cur := ""; ; {
		p, err := store.List(ctx, pipeline.Filter{Status: pipeline.StatusDeadLetter, Cursor: cur, Limit: 500})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range p.Jobs {
			listed[j.JobID] = true
			if !deadIDs[j.JobID] {
				dlqMismatch = append(dlqMismatch, j.JobID)
			}
		}
		if cur = p.NextCursor; cur == "" {
			break
		}
	}
	for id := range deadIDs {
		if !listed[id] {
			dlqMismatch = append(dlqMismatch, id)
		}
	}
	if _, dlq, err := store.Counts(ctx); err != nil || int(dlq) != dead {
		ch.Failf(nil, "dlq_size %d (%v), %d dead-lettered rows", dlq, err, dead)
	}
	failEach(ch, []idList{
		{wrongEnd, "jobs that ended in a state or with a code the contract and their stage do not allow"},
		{noReason, "failed or dead-lettered jobs without error_code and attempt"},
		{dedupe(badAttempts), "jobs whose attempts do not add up (a run outside 1..attempts, or a dead letter short of max_attempts)"},
		{dedupe(twice), "jobs with one attempt delivered to two runs"},
		{notLast, "succeeded jobs whose recorded result is not their last attempt's"},
		{noResult, "succeeded jobs without their stored result"},
		{twoSuccesses, "jobs whose success was written twice"},
		{dedupe(dlqMismatch), "jobs where the DLQ listing and the rows disagree"},
	})
	if c.crash > 0 {
		ch.Failf(nil, "%d serve processes exited without being killed", c.crash)
	}
	ch.Figure("jobs", fmt.Sprintf("%d (%d succeeded, %d failed, %d dead-lettered)", len(ids), succeeded, failed, dead))
	ch.Figure("lost (jobs not terminal)", len(ids)-succeeded-failed-dead)
	ch.Figure("duplicated (attempts run twice, successes written twice)", len(dedupe(twice))+len(twoSuccesses))
	ch.Figure("stage runs beyond one per job (retries and reclaims after kills)", redelivered)
	ch.Figure("dead letters whose last attempt was killed (VISIBILITY_TIMEOUT)", deadByKills)
	ch.Figure("fenced writes refused as stale (lease lost)", fenced)
	ch.Figure("processes that exited on their own", c.crash)
}
