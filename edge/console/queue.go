package console

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// ScanLimit bounds the keys one listing of the latest jobs reads: job
// hashes have no index (the streams contract defines none), so the list
// is built from a SCAN of job:* hashes. Past this many the page says the
// list is partial.
var ScanLimit = 20000

// JobRow is one line of the jobs list.
type JobRow struct {
	ID        string
	Task      string
	Status    string
	CreatedMS int64
	UpdatedMS int64
}

// JobList is a page of the latest jobs.
type JobList struct {
	Rows    []JobRow
	Counts  map[string]int // by status, over every job read
	Total   int
	Partial bool // ScanLimit was reached
}

// LatestJobs returns up to limit jobs, newest first, with status (all when
// "").
func LatestJobs(ctx context.Context, rdb redis.UniversalClient, status string, limit int) (JobList, error) {
	var keys []string
	partial := false
	var cursor uint64
	for {
		ks, next, err := rdb.ScanType(ctx, cursor, "job:*", 1000, "hash").Result()
		if err != nil {
			return JobList{}, fmt.Errorf("scan jobs: %w", err)
		}
		for _, k := range ks {
			// job:{id} only; idempotency and other keys have other prefixes,
			// and job:{id}:events is a stream.
			if strings.Count(k, ":") == 1 {
				keys = append(keys, k)
			}
		}
		cursor = next
		if cursor == 0 {
			break
		}
		if len(keys) >= ScanLimit {
			partial = true
			break
		}
	}
	pipe := rdb.Pipeline()
	cmds := make([]*redis.SliceCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HMGet(ctx, k, "job_id", "task", "status", "created_ts", "updated_ts")
	}
	if len(keys) > 0 {
		// Exec reports the first failed command; each is judged below.
		_, _ = pipe.Exec(ctx)
	}
	out := JobList{Counts: map[string]int{}, Partial: partial}
	var rows []JobRow
	for _, c := range cmds {
		v, err := c.Result()
		if err != nil && !errors.Is(err, redis.Nil) && !jobs.IsWrongType(err) {
			return JobList{}, fmt.Errorf("read jobs: %w", err)
		}
		if err != nil || len(v) != 5 || v[0] == nil {
			// Expired between SCAN and HMGET, or deleted and its name
			// reused for another type: no job there any more.
			continue
		}
		// The fields are whatever the worker side wrote; CapMessage keeps
		// one from filling the page.
		r := JobRow{ID: capped(v[0]), Task: capped(v[1]), Status: capped(v[2]), CreatedMS: num(v[3]), UpdatedMS: num(v[4])}
		out.Counts[r.Status]++
		out.Total++
		if status == "" || r.Status == status {
			rows = append(rows, r)
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].CreatedMS != rows[j].CreatedMS {
			return rows[i].CreatedMS > rows[j].CreatedMS
		}
		return rows[i].ID > rows[j].ID
	})
	if len(rows) > limit {
		rows = rows[:limit]
	}
	out.Rows = rows
	return out, nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func capped(v any) string { return daemon.CapMessage(str(v)) }

func num(v any) int64 {
	n, _ := strconv.ParseInt(str(v), 10, 64)
	return n
}

// Worker is one consumer of the group and the jobs it holds.
type Worker struct {
	Name    string
	Pending int64
	IdleMS  int64
	Jobs    []HeldJob
}

// HeldJob is a queue message a consumer holds (delivered, not acked).
type HeldJob struct {
	MsgID      string
	JobID      string
	Task       string
	Deliveries int64
	IdleMS     int64
}

// DeadLetter is one entry of jobs:dead.
type DeadLetter struct {
	EntryID    string
	JobID      string
	Task       string
	Reason     string
	Deliveries string
	Consumer   string
	TS         int64
	Payload    string
}

// Queue is the queue health page's numbers.
type Queue struct {
	Backlog     int64
	Pending     int64
	Undelivered int64
	StreamLen   int64
	DeadLen     int64
	Dead        []DeadLetter
	Workers     []Worker
	GroupExists bool
}

// heldPerWorker bounds the messages listed per consumer.
const heldPerWorker = 20

// ReadQueue reads the queue's state: one XINFO GROUPS/CONSUMERS, the
// pending entries of each consumer and the newest dead letters.
func ReadQueue(ctx context.Context, store *jobs.Store, deadN int64) (Queue, error) {
	rdb := store.Redis()
	var q Queue
	var err error
	if q.Backlog, err = store.Backlog(ctx, 1<<40); err != nil {
		return q, err
	}
	if q.StreamLen, err = rdb.XLen(ctx, jobs.QueueStream).Result(); err != nil {
		return q, fmt.Errorf("queue length: %w", err)
	}
	if q.DeadLen, err = rdb.XLen(ctx, jobs.DeadStream).Result(); err != nil {
		return q, fmt.Errorf("dead letters: %w", err)
	}
	if deadN > 0 && q.DeadLen > 0 {
		msgs, err := rdb.XRevRangeN(ctx, jobs.DeadStream, "+", "-", deadN).Result()
		if err != nil {
			return q, fmt.Errorf("dead letters: %w", err)
		}
		for _, m := range msgs {
			g := func(k string) string { return capped(m.Values[k]) }
			// The payload is clipped where the page shows it (PageText).
			q.Dead = append(q.Dead, DeadLetter{
				EntryID: m.ID, JobID: g("job_id"), Task: g("task"), Reason: g("reason"), Deliveries: g("deliveries"),
				Consumer: g("consumer"), TS: num(m.Values["ts"]), Payload: str(m.Values["payload"]),
			})
		}
	}
	cons, err := rdb.XInfoConsumers(ctx, jobs.QueueStream, jobs.Group).Result()
	if err != nil {
		if isNoGroup(err) {
			return q, nil
		}
		return q, fmt.Errorf("workers: %w", err)
	}
	q.GroupExists = true
	for _, c := range cons {
		w := Worker{Name: daemon.CapMessage(c.Name), Pending: c.Pending, IdleMS: c.Idle.Milliseconds()}
		q.Pending += c.Pending
		if c.Pending > 0 {
			held, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
				Stream: jobs.QueueStream, Group: jobs.Group, Start: "-", End: "+", Count: heldPerWorker, Consumer: c.Name,
			}).Result()
			if err != nil {
				return q, fmt.Errorf("pending of %s: %w", c.Name, err)
			}
			for _, h := range held {
				hj := HeldJob{MsgID: h.ID, Deliveries: h.RetryCount, IdleMS: h.Idle.Milliseconds()}
				if m, err := rdb.XRangeN(ctx, jobs.QueueStream, h.ID, h.ID, 1).Result(); err == nil && len(m) == 1 {
					hj.JobID, hj.Task = capped(m[0].Values["job_id"]), capped(m[0].Values["task"])
				}
				w.Jobs = append(w.Jobs, hj)
			}
		}
		q.Workers = append(q.Workers, w)
	}
	q.Undelivered = q.Backlog - q.Pending
	if q.Undelivered < 0 {
		q.Undelivered = 0
	}
	return q, nil
}

func isNoGroup(err error) bool {
	s := err.Error()
	return strings.Contains(s, "NOGROUP") || strings.Contains(s, "no such key") || strings.Contains(s, "ERR no such")
}
