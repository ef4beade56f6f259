package jobs

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

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
// Either key holding another type than a hash (a value someone SET there)
// would fail every take, and a drops hash of another type makes the
// scripts refuse deltas at the cap. Such a key is renamed first, to its
// name plus ":bad:<ARGV[1]>" (a suffix "-n" when that name is taken, so
// nothing is replaced), and kept there, with no TTL, for an operator; the
// take goes on without it. Reply: {set aside as name, key, type..., the
// taken hash as HGETALL}.
//
// KEYS: drops hash, taken drops hash. ARGV: Unix ms, for the names.
var takeDropsScript = redis.NewScript(`
local aside = {}
local function setAside(k)
  local t = redis.call('TYPE', k)['ok']
  if t == 'none' or t == 'hash' then return t end
  local base = k .. ':bad:' .. ARGV[1]
  local name, n = base, 0
  while redis.call('EXISTS', name) == 1 do
    n = n + 1
    name = base .. '-' .. n
  end
  redis.call('RENAME', k, name)
  -- RENAME keeps a TTL the key had; what is kept for an operator must not
  -- expire before one has read it.
  redis.call('PERSIST', name)
  aside[#aside + 1] = name
  aside[#aside + 1] = k
  aside[#aside + 1] = t
  return 'none'
end
local taken = setAside(KEYS[2])
local drops = setAside(KEYS[1])
if taken == 'none' then
  if drops == 'none' then return {aside, {}} end
  redis.call('RENAME', KEYS[1], KEYS[2])
end
return {aside, redis.call('HGETALL', KEYS[2])}
`)

// SetAside is a drops key TakeDrops found holding another type than the
// hash the scripts write, and renamed: its content is kept, unread, for an
// operator to look at and delete.
type SetAside struct {
	Key  string // the name it had (CaptureDrops or CaptureDropsTaken)
	Name string // the name it has now: Key + ":bad:<unix ms>[-n]"
	Type string // as TYPE answers: string, list, ...
}

// TakeDrops returns the drops recorded on the capture stream stream's cap,
// by job id and first entry, and how many records it could not read
// (this package's scripts write none such). Until ReleaseDrops it returns
// the same drops again (and none recorded since), so a taker that dies
// before it has recorded them elsewhere loses none: it may at worst
// record them twice. A taker that got anything, readable or not, releases
// it, or no later drop is taken. A drops key of another type is renamed
// out of the way first and reported in aside, which the taker should make
// known: it is not read, and nothing else reports it.
func TakeDrops(ctx context.Context, rdb redis.UniversalClient, stream string) (drops []Drop, unreadable int, aside []SetAside, err error) {
	res, err := takeDropsScript.Run(ctx, rdb, []string{stream + dropsSuffix, stream + takenSuffix},
		time.Now().UnixMilli()).Slice()
	if err != nil {
		return nil, 0, nil, fmt.Errorf("take capture drops: %w", err)
	}
	var names, kv []string
	if len(res) == 2 {
		names, err = stringsOf(res[0])
		if err == nil {
			kv, err = stringsOf(res[1])
		}
	} else {
		err = fmt.Errorf("a reply of %d parts", len(res))
	}
	if err != nil {
		return nil, 0, nil, fmt.Errorf("take capture drops: %w", err)
	}
	for i := 0; i+2 < len(names); i += 3 {
		aside = append(aside, SetAside{Name: names[i], Key: names[i+1], Type: names[i+2]})
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
	return out, unreadable, aside, nil
}

// stringsOf is a script's array reply of strings.
func stringsOf(v any) ([]string, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("a reply of %T, not an array", v)
	}
	out := make([]string, len(a))
	for i, e := range a {
		if out[i], ok = e.(string); !ok {
			return nil, fmt.Errorf("an array holding %T, not strings", e)
		}
	}
	return out, nil
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
// out of it, as counted in Redis: 0 when none was, an error when Redis
// cannot be read or the count is not a number.
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
