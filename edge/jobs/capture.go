package jobs

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Captured is one entry of CaptureStream: an event the scripts wrote to
// job:{JobID}:events under the entry id Entry, with the job's task.
type Captured struct {
	ID    string // the entry's id on CaptureStream
	JobID string
	Entry string // the event's entry id on job:{JobID}:events
	Type  string
	Step  string
	Task  string
	TS    int64
	Data  string // as written (JSON)
}

// CapturedFromValues builds a Captured from a CaptureStream entry.
func CapturedFromValues(id string, v map[string]any) Captured {
	str := func(k string) string { s, _ := v[k].(string); return s }
	return Captured{ID: id, JobID: str("job_id"), Entry: str("entry"), Type: str("type"), Step: str("step"),
		Task: str("task"), TS: atoi(str("ts")), Data: str("data")}
}

// CaptureDroppable is the only event type the capture cap (Store.CaptureMax)
// leaves out of the capture stream: streamed output, of which a job writes
// many and whose loss central records as a gap. Lifecycle and terminal
// events are what central must not miss; they are bounded by the number
// of jobs and always captured.
const CaptureDroppable = "delta"

// Keys of the capture cap, named after the capture stream (extension keys,
// like CaptureStream). CaptureDrops is a hash with one field per job whose
// deltas were not captured, "first_entry first_ts last_entry last_ts
// count"; TakeDrops renames it to CaptureDropsTaken until ReleaseDrops.
// CaptureDroppedTotal counts every drop, for the metrics.
const (
	dropsSuffix        = ":dropped"
	takenSuffix        = ":dropped:taken"
	droppedTotalSuffix = ":dropped_total"

	CaptureDrops        = CaptureStream + dropsSuffix
	CaptureDropsTaken   = CaptureStream + takenSuffix
	CaptureDroppedTotal = CaptureStream + droppedTotalSuffix
)

// Drop is a run of one job's deltas the scripts did not capture.
type Drop struct {
	JobID      string
	Count      int64
	FirstEntry string // entry ids on job:{JobID}:events
	LastEntry  string
	FirstTS    int64
	LastTS     int64
}

// takeDropsScript hands out the drops taken and not released, or else
// takes the recorded drops aside (RENAME, O(1)) and hands them out: the
// scripts go on recording later drops in a fresh hash, and what was taken
// stays in Redis until the taker says it is recorded elsewhere.
//
// KEYS: drops hash, taken drops hash
var takeDropsScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[2]) == 0 then
  if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
  redis.call('RENAME', KEYS[1], KEYS[2])
end
return redis.call('HGETALL', KEYS[2])
`)

// TakeDrops returns the drops recorded on the capture stream stream's cap,
// by job id and first entry, and how many records it could not read
// (this package's scripts write none such). Until ReleaseDrops it returns
// the same drops again (and none recorded since), so a taker that dies
// before it has recorded them elsewhere loses none: it may at worst
// record them twice. A taker that got anything, readable or not, releases
// it, or no later drop is taken.
func TakeDrops(ctx context.Context, rdb redis.UniversalClient, stream string) (drops []Drop, unreadable int, err error) {
	kv, err := takeDropsScript.Run(ctx, rdb, []string{stream + dropsSuffix, stream + takenSuffix}).StringSlice()
	if err != nil {
		return nil, 0, fmt.Errorf("take capture drops: %w", err)
	}
	out := make([]Drop, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		if d, ok := parseDrop(kv[i], kv[i+1]); ok {
			out = append(out, d)
		} else {
			unreadable++
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].JobID < out[j].JobID || (out[i].JobID == out[j].JobID && out[i].FirstEntry < out[j].FirstEntry)
	})
	return out, unreadable, nil
}

// ReleaseDrops forgets the drops TakeDrops handed out; call it once they
// are recorded elsewhere.
func ReleaseDrops(ctx context.Context, rdb redis.UniversalClient, stream string) error {
	if err := rdb.Del(ctx, stream+takenSuffix).Err(); err != nil {
		return fmt.Errorf("release capture drops: %w", err)
	}
	return nil
}

// DroppedTotal is how many deltas the capture stream stream's cap kept
// out of it, as counted in Redis (0 when none or unreadable as a number).
func DroppedTotal(ctx context.Context, rdb redis.UniversalClient, stream string) (int64, error) {
	n, err := rdb.Get(ctx, stream+droppedTotalSuffix).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("capture drops total: %w", err)
	}
	return n, nil
}

func parseDrop(job, v string) (Drop, bool) {
	f := strings.Fields(v)
	if len(f) != 5 {
		return Drop{}, false
	}
	d := Drop{JobID: job, FirstEntry: f[0], LastEntry: f[2]}
	var err1, err2, err3 error
	d.FirstTS, err1 = strconv.ParseInt(f[1], 10, 64)
	d.LastTS, err2 = strconv.ParseInt(f[3], 10, 64)
	d.Count, err3 = strconv.ParseInt(f[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || d.Count <= 0 {
		return Drop{}, false
	}
	if _, err := ParseStreamID(d.FirstEntry); err != nil {
		return Drop{}, false
	}
	if _, err := ParseStreamID(d.LastEntry); err != nil {
		return Drop{}, false
	}
	return d, true
}
