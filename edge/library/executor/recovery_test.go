package executor_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/edge/library/executor"
)

const t0 = int64(1_700_000_000_000)

// fixClock makes e's store clock a value the test moves (Unix ms).
func fixClock(e *env) *atomic.Int64 {
	var ms atomic.Int64
	ms.Store(t0)
	e.st.Now = func() time.Time { return time.UnixMilli(ms.Load()) }
	return &ms
}

// TestClaimPathRecoveryPerTable checks the stale-lease recovery of every
// leased table (§4.2–§4.5): a running row whose lease expired (or is
// missing) is recovered with the table's rule, a live lease is left alone.
// The guard triggers prove every recovery stays inside the §7 whitelists.
func TestClaimPathRecoveryPerTable(t *testing.T) {
	type result struct {
		status                      string
		errorCode                   *string
		retryCount, retryAfter, fin *int64
	}
	cases := []struct {
		table   string
		insert  map[string]any
		recover func(*executor.Executor, context.Context) (int64, error)
		want    result // for a recovered row; nil pointers = column not checked
	}{
		{"jobs", map[string]any{"kind": "scan", "retry_count": 1},
			(*executor.Executor).RecoverStaleJobs,
			result{status: "retryable", errorCode: ptr(executor.CodeLeaseExpired), retryCount: ptr(int64(1)), fin: ptr(t0)}},
		{"thumbnails", map[string]any{"file_id": 1, "error_count": 1},
			(*executor.Executor).RequeueStaleThumbnails,
			result{status: "pending"}},
		{"thumbnail_cleanup_jobs", map[string]any{"group_key": "blake3:x"},
			(*executor.Executor).RequeueStaleCleanups,
			result{status: "pending"}},
		// retry_count 2 -> 3; retry_after = now + Delay(3) = now + 0.5 * Ceiling(3).
		{"wal_maintenance_jobs", map[string]any{"requested_mode": "truncate", "retry_count": 2},
			(*executor.Executor).RecoverStaleWAL,
			result{status: "retryable", errorCode: ptr(executor.CodeLeaseExpired), retryCount: ptr(int64(3)),
				retryAfter: ptr(t0 + 2*(50*time.Millisecond).Milliseconds()), fin: ptr(t0)}},
	}
	leases := []struct {
		name    string
		lease   any
		recover bool
	}{
		{"expired", t0 - 1, true},
		{"expires now", t0, true},
		{"missing", nil, true},
		{"live", t0 + 1, false},
	}
	for _, c := range cases {
		for _, l := range leases {
			t.Run(c.table+"/"+l.name, func(t *testing.T) {
				e := newEnv(t, true)
				fixClock(e)
				e.x.Retry.Rand = func() float64 { return 0.5 }
				ctx := context.Background()
				cols := map[string]any{"status": "running", "worker_id": "dead#1", "worker_heartbeat_at": t0 - 5000, "lease_expires_at": l.lease}
				for k, v := range c.insert {
					cols[k] = v
				}
				id := insertRow(t, e, c.table, cols)
				n, err := c.recover(e.x, ctx)
				if err != nil {
					t.Fatal(err)
				}
				var status string
				var worker *string
				var hb, lease *int64
				if err := e.st.DB.QueryRow(`SELECT status, worker_id, worker_heartbeat_at, lease_expires_at FROM `+c.table+` WHERE id = ?`, id).
					Scan(&status, &worker, &hb, &lease); err != nil {
					t.Fatal(err)
				}
				if !l.recover {
					if n != 0 || status != "running" || worker == nil || lease == nil {
						t.Fatalf("live lease touched: n=%d %s %v %v", n, status, worker, lease)
					}
					return
				}
				if n != 1 || status != c.want.status || worker != nil || hb != nil || lease != nil {
					t.Fatalf("n=%d status=%s worker=%v heartbeat=%v lease=%v, want %s with lease fields cleared",
						n, status, worker, hb, lease, c.want.status)
				}
				if c.want.errorCode != nil {
					var code string
					e.st.DB.QueryRow(`SELECT error_code FROM `+c.table+` WHERE id = ?`, id).Scan(&code)
					if code != *c.want.errorCode {
						t.Fatalf("error_code %q", code)
					}
				}
				for col, want := range map[string]*int64{"retry_count": c.want.retryCount, "retry_after": c.want.retryAfter, "finished_at": c.want.fin} {
					if want == nil {
						continue
					}
					var got *int64
					e.st.DB.QueryRow(`SELECT `+col+` FROM `+c.table+` WHERE id = ?`, id).Scan(&got)
					if got == nil || *got != *want {
						t.Fatalf("%s = %v, want %d", col, derefI(got), *want)
					}
				}
			})
		}
	}
}

func insertRow(t *testing.T, e *env, table string, cols map[string]any) int64 {
	t.Helper()
	q, args := "INSERT INTO "+table+"(", []any{}
	vals := ""
	for c, v := range cols {
		if len(args) > 0 {
			q += ", "
			vals += ", "
		}
		q += c
		vals += "?"
		args = append(args, v)
	}
	res, err := e.st.DB.Exec(q+") VALUES ("+vals+")", args...)
	if err != nil {
		t.Fatalf("insert %s: %v", table, err)
	}
	id, _ := res.LastInsertId()
	return id
}

func ptr[T any](v T) *T { return &v }

func derefI(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}
