package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// Errors callers match with errors.Is.
var (
	// ErrNotFound: no job hash (never created, or expired).
	ErrNotFound = errors.New("job not found")
	// ErrFinished: the job is already done, error or canceled. It comes
	// wrapped together with a *lease.TransitionError naming both states.
	ErrFinished = errors.New("job already finished")
	// ErrIdempotencyConflict: the idempotency key belongs to another request body.
	ErrIdempotencyConflict = errors.New("idempotency key reused with a different request")
	// ErrUnknownStatus: the job's status is none of the state machine's
	// (a corrupt hash, or a status a newer version wrote), or its hash or
	// events key holds another type. No transition can leave it, and none
	// is forced: the keys are left as they are. For a status it comes
	// wrapped together with a *lease.TransitionError.
	ErrUnknownStatus = errors.New("job status outside the state machine")
)

// Store reads and writes the edge job data model on one Redis client.
type Store struct {
	rdb redis.UniversalClient
	// QueueMaxLen, when not 0, is an emergency cap on jobs:stream (XADD
	// MAXLEN ~). Trimming drops the oldest entries whether finished or not,
	// so it must stay far above any backlog; normally it is 0 and the
	// stream stays small because finished entries are deleted (Ack).
	QueueMaxLen int64
	// Now is the clock for created_ts/updated_ts/ts; tests may replace it.
	Now func() time.Time
	// Capture, when not empty, is the stream (CaptureStream) every event
	// the scripts write is also appended to, atomically with the write,
	// for the sync shipper. Empty (sync off) captures nothing. Set it
	// before the store is shared.
	Capture string
	// CaptureMax, when positive, caps Capture: a delta written while the
	// stream holds that many entries is not captured, and its drop is
	// recorded for the shipper to report as a gap (see TakeDrops). Other
	// events are captured whatever the stream holds. Set it with Capture.
	CaptureMax int64

	lagMode atomic.Int32 // whether XINFO GROUPS reports lag (Redis 7+)
}

// NewStore returns a Store on rdb.
func NewStore(rdb redis.UniversalClient) *Store {
	return &Store{rdb: rdb, Now: time.Now}
}

// Redis returns the client the store uses.
func (s *Store) Redis() redis.UniversalClient { return s.rdb }

func (s *Store) nowMS() int64 { return s.Now().UnixMilli() }

// NewJob is what Create needs.
type NewJob struct {
	Task    string
	Payload json.RawMessage // a JSON object, stored verbatim
	TTL     int64           // seconds, > 0
	// IdempotencyKey, when set, makes Create return the job first created
	// with that key; Fingerprint identifies the request body so a different
	// body under the same key is ErrIdempotencyConflict.
	IdempotencyKey string
	Fingerprint    string
}

// newJobID draws a job id; tests replace it to make ids collide.
var newJobID = uuid.NewString

// Created is the outcome of Create.
type Created struct {
	ID string
	// Duplicate is true when an earlier request with the same idempotency
	// key and fingerprint already created the job; nothing was written.
	Duplicate bool
	// Status is the duplicate's status when it was looked up.
	Status    Status
	EventID   string // id of the "queued" event (empty for duplicates)
	MessageID string // id of the jobs:stream entry (empty for duplicates)
}

// ErrStaleIdempotency: the idempotency key kept naming jobs that were gone
// each time Create tried to replace its record.
var ErrStaleIdempotency = errors.New("idempotency record keeps naming vanished jobs")

// staleAttempts bounds how often Create replaces a record whose job is
// gone; each attempt loses only to a concurrent request that replaced it.
const staleAttempts = 3

// collisionAttempts bounds how often Create draws another id after finding
// a job under the one it drew. A v4 UUID drawn twice is all but impossible,
// so a second collision in a row means ids are not random and more draws
// would not help; it does not spend the stale-record budget.
const collisionAttempts = 3

// idempotencyRecord is what a taken idempotency key says.
type idempotencyRecord struct {
	JobID       string `json:"job_id"`
	Fingerprint string `json:"fingerprint"`
}

// parseIdempotencyRecord reads idempotency:{key} in the contract's form (the
// job id, with the fingerprint from its sibling key, "" when the record was
// written elsewhere) or in the JSON form earlier versions stored
// ({"job_id","fingerprint"}), which lives on until its TTL.
func parseIdempotencyRecord(value, fingerprint string) (idempotencyRecord, bool) {
	if strings.HasPrefix(value, "{") {
		var rec idempotencyRecord
		if err := json.Unmarshal([]byte(value), &rec); err != nil || rec.JobID == "" {
			return rec, false
		}
		return rec, true
	}
	if _, err := uuid.Parse(value); err != nil || len(value) != 36 {
		return idempotencyRecord{}, false
	}
	return idempotencyRecord{JobID: value, Fingerprint: fingerprint}, true
}

// Create writes the job hash (status queued, TTL), the initial event
// type=queued step=gateway.enqueue data={} and the jobs:stream entry
// job_id/task/payload in one atomic script. A key of another type where it
// would write (jobs:stream, the capture stream, the idempotency record) is
// a *WrongTypeError (ErrWrongType), and then nothing is written.
//
// An idempotency record lives as long as its job (both get the job's TTL),
// so a record naming a job that is gone (deleted, or a record another
// gateway kept longer) can give nothing back: the key is treated as free
// and taken for the new job, in the script, only if it still holds that
// record and the job is still gone, so concurrent requests create one job.
//
// The script finds out when it runs a second time for one call (the client
// resending it after a lost reply) and answers as it first did, so a job is
// queued once however often its create is sent.
func (s *Store) Create(ctx context.Context, nj NewJob) (Created, error) {
	if !ValidTask(nj.Task) {
		return Created{}, fmt.Errorf("create job: unknown task %q", nj.Task)
	}
	if nj.TTL <= 0 || nj.TTL > MaxTTL {
		return Created{}, fmt.Errorf("create job: ttl %d must be between 1 and %d", nj.TTL, MaxTTL)
	}
	id := newJobID()
	stale, staleJob := "", ""
	for staled, collided := 0, 0; staled < staleAttempts; {
		keys := []string{JobKey(id), EventsKey(id), QueueStream}
		if nj.IdempotencyKey != "" {
			keys = append(keys, IdempotencyKey(nj.IdempotencyKey), IdempotencyFingerprintKey(nj.IdempotencyKey))
			if stale != "" {
				keys = append(keys, JobKey(staleJob))
			}
		}
		res, err := createScript.Run(ctx, s.rdb, keys, id, nj.Task, string(nj.Payload), s.nowMS(), nj.TTL, nj.Fingerprint, s.QueueMaxLen, s.Capture, stale, nj.IdempotencyKey).StringSlice()
		if err != nil {
			return Created{}, fmt.Errorf("create job: %w", err)
		}
		if len(res) >= 3 && res[0] == "created" {
			return Created{ID: id, EventID: res[1], MessageID: res[2]}, nil
		}
		if len(res) == 3 && res[0] == "wrongtype" {
			return Created{}, fmt.Errorf("create job: %w", &WrongTypeError{Key: res[1], Type: res[2]})
		}
		if len(res) == 1 && res[0] == "collision" {
			// Another job has this id: the create wrote nothing.
			if collided++; collided == collisionAttempts {
				return Created{}, fmt.Errorf("create job: %d ids drawn in a row belong to other jobs", collided)
			}
			id = newJobID()
			continue
		}
		if len(res) != 3 || res[0] != "duplicate" {
			return Created{}, fmt.Errorf("create job: unexpected script reply %q", res)
		}
		c, live, err := s.duplicate(ctx, res[1], res[2], nj.Fingerprint)
		if err != nil {
			return c, fmt.Errorf("create job: %w", err)
		}
		if live {
			return c, nil
		}
		stale, staleJob = res[1], c.ID
		staled++
	}
	return Created{}, fmt.Errorf("create job: idempotency key %q: %w", nj.IdempotencyKey, ErrStaleIdempotency)
}

// duplicate is the answer to a request whose idempotency key holds value
// (with fingerprint stored beside it): the job it names with its status,
// or ErrIdempotencyConflict for another fingerprint. live is false, with
// the job id and no error, when that job is gone.
func (s *Store) duplicate(ctx context.Context, value, stored, fingerprint string) (c Created, live bool, err error) {
	rec, ok := parseIdempotencyRecord(value, stored)
	if !ok {
		return Created{}, true, fmt.Errorf("unreadable idempotency record: %w", ErrIdempotencyConflict)
	}
	status, err := s.rdb.HGet(ctx, JobKey(rec.JobID), "status").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return Created{}, true, fmt.Errorf("idempotency record's job %s: %w", rec.JobID, err)
	}
	if status == "" {
		return Created{ID: rec.JobID}, false, nil
	}
	// No fingerprint: another implementation of the contract wrote the
	// record, and only the job id can be compared, so it is replayed.
	if rec.Fingerprint != "" && rec.Fingerprint != fingerprint {
		return Created{ID: rec.JobID}, true, ErrIdempotencyConflict
	}
	return Created{ID: rec.JobID, Duplicate: true, Status: status}, true, nil
}

// Replay answers a create with Idempotency-Key key the way Create would if
// the key is taken: the job it names (Duplicate), or ErrIdempotencyConflict
// for another fingerprint. ok is false when the key is free, or names a job
// that is gone (Create would take it for a new job). It writes nothing, so
// a gateway refusing new work (a full backlog) can still give a retried
// request the job it already created.
func (s *Store) Replay(ctx context.Context, key, fingerprint string) (c Created, ok bool, err error) {
	vals, err := s.rdb.MGet(ctx, IdempotencyKey(key), IdempotencyFingerprintKey(key)).Result()
	if err != nil {
		return Created{}, false, fmt.Errorf("replay idempotency key: %w", err)
	}
	value, _ := vals[0].(string)
	if value == "" {
		return Created{}, false, nil
	}
	stored, _ := vals[1].(string)
	c, live, err := s.duplicate(ctx, value, stored, fingerprint)
	if err != nil {
		return c, true, fmt.Errorf("replay: %w", err)
	}
	if !live {
		return Created{}, false, nil
	}
	return c, true, nil
}

// IsWrongType reports a Redis WRONGTYPE reply: the key holds another type
// than the command reads.
func IsWrongType(err error) bool { return redis.HasErrorPrefix(err, "WRONGTYPE") }

// Get reads job:{id} with payload, result and error deserialized. A key
// holding another type than a hash is ErrUnknownStatus.
func (s *Store) Get(ctx context.Context, id string) (*Job, error) {
	h, err := s.rdb.HGetAll(ctx, JobKey(id)).Result()
	if IsWrongType(err) {
		return nil, fmt.Errorf("get job %s: key holds another type: %w: %w", id, ErrUnknownStatus, err)
	}
	if err != nil {
		return nil, fmt.Errorf("get job %s: %w", id, err)
	}
	if len(h) == 0 || h["status"] == "" {
		return nil, fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	return jobFromHash(h), nil
}

// Exists reports whether job:{id} is present.
func (s *Store) Exists(ctx context.Context, id string) (bool, error) {
	n, err := s.rdb.Exists(ctx, JobKey(id)).Result()
	if err != nil {
		return false, fmt.Errorf("job %s exists: %w", id, err)
	}
	return n == 1, nil
}

// Transition is one atomic write to a job after its creation.
type Transition struct {
	// To is the new status; "" appends an event without changing status
	// (then only non-terminal jobs accept it).
	To Status
	// EventType defaults to To. Step and Data describe the event; Data
	// defaults to Result for done, Error for error, else {}.
	EventType string
	Step      string
	Data      json.RawMessage
	// Result and Error are stored in the hash when non-empty (JSON).
	Result json.RawMessage
	Error  json.RawMessage
	// AckMessageID, when set, XACKs then XDELs that jobs:stream message in
	// the same script (after the hash update and the event): on success,
	// and also when the job is gone or already terminal. An id that is no
	// stream id is refused before anything is written.
	AckMessageID string
	// Publish sends the job id on CancelChannel(id) in the same script.
	Publish bool
	// Token identifies this write so that running it again writes nothing
	// and answers as the first run did (see transitionScript): "" draws
	// one for the call (NewToken), which covers the client's own resends.
	// A caller that retries a write after an error it cannot tell from a
	// lost reply keeps one token for all its attempts.
	Token string
}

// Apply runs t against job id in one round trip. It returns the new event's
// stream id, ErrNotFound, or an error matching both ErrFinished (when the
// job is terminal) and lease.ErrInvalidTransition.
func (s *Store) Apply(ctx context.Context, id string, t Transition) (string, error) {
	c, err := s.prepare(id, t)
	if err != nil {
		return "", err
	}
	res, err := transitionScript.Run(ctx, s.rdb, c.keys, c.args...).StringSlice()
	return c.interpret(res, err)
}

// SetRunning marks the job running and emits the "running" event.
func (s *Store) SetRunning(ctx context.Context, id, step string, data json.RawMessage) (string, error) {
	return s.Apply(ctx, id, Transition{To: Running, Step: step, Data: data})
}

// Finish moves the job to done (storing result) or error (storing errValue)
// with its terminal event, and acknowledges ackMessageID when not empty.
func (s *Store) Finish(ctx context.Context, id string, status Status, step string, result, errValue json.RawMessage, ackMessageID string) (string, error) {
	if status != Done && status != Error {
		return "", fmt.Errorf("job %s: finish with %q: want done or error", id, status)
	}
	return s.Apply(ctx, id, Transition{To: status, Step: step, Result: result, Error: errValue, AckMessageID: ackMessageID})
}

// Cancel moves a queued or running job to canceled with a terminal
// "canceled" event and publishes the job id on CancelChannel(id).
func (s *Store) Cancel(ctx context.Context, id, step, reason string) (string, error) {
	data, _ := json.Marshal(map[string]string{"reason": reason})
	return s.Apply(ctx, id, Transition{To: Canceled, Step: step, Data: data, Publish: true})
}

// AppendEvent adds a non-terminal event (progress, token, ...) to a job
// that is not finished, refreshing updated_ts and both TTLs.
func (s *Store) AppendEvent(ctx context.Context, id, typ, step string, data json.RawMessage) (string, error) {
	return s.Apply(ctx, id, Transition{EventType: typ, Step: step, Data: data})
}

// Events returns up to count events of job id after the stream id after
// ("0" or "" for the start), oldest first.
func (s *Store) Events(ctx context.Context, id, after string, count int64) ([]Event, error) {
	start := "-"
	if after != "" && after != "0" {
		a, err := ParseStreamID(after)
		if err != nil {
			return nil, err
		}
		start = a.Next().String()
	}
	msgs, err := s.rdb.XRangeN(ctx, EventsKey(id), start, "+", count).Result()
	if err != nil {
		return nil, fmt.Errorf("events of job %s: %w", id, err)
	}
	out := make([]Event, len(msgs))
	for i, m := range msgs {
		out[i] = EventFromValues(m.ID, m.Values)
	}
	return out, nil
}

// EnsureGroup creates the consumer group "workers" on jobs:stream (and the
// stream) reading from the beginning, so jobs enqueued before any worker
// started are delivered. An existing group is left alone.
func (s *Store) EnsureGroup(ctx context.Context) error {
	err := s.rdb.XGroupCreateMkStream(ctx, QueueStream, Group, "0").Err()
	if err != nil && !isBusyGroup(err) {
		return fmt.Errorf("create group %s on %s: %w", Group, QueueStream, err)
	}
	return nil
}

func isBusyGroup(err error) bool {
	return err != nil && len(err.Error()) >= 9 && err.Error()[:9] == "BUSYGROUP"
}
