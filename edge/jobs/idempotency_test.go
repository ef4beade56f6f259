package jobs_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// idempotency:{key} holds the job id, as the edge streams contract says,
// with the job's TTL; the request fingerprint lives in a key of its own.
// Records in the contract's form written by another gateway (no
// fingerprint) and in this gateway's former JSON form are both honoured.
func TestIdempotencyRecordForms(t *testing.T) { testsvc.EachRedis(t, testIdempotencyRecordForms) }

func testIdempotencyRecordForms(t *testing.T) {
	st, rdb := newStore(t)
	ctx := context.Background()
	nj := jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60, IdempotencyKey: "ours", Fingerprint: "f1"}
	a, err := st.Create(ctx, nj)
	require.NoError(t, err)

	t.Run("written as the job id", func(t *testing.T) {
		v, err := rdb.Get(ctx, jobs.IdempotencyKey("ours")).Result()
		require.NoError(t, err)
		assert.Equal(t, a.ID, v)
		ttl := rdb.TTL(ctx, jobs.IdempotencyKey("ours")).Val()
		assert.True(t, ttl > 50e9 && ttl <= 60e9, "ttl %v", ttl)
		fp, err := rdb.Get(ctx, jobs.IdempotencyFingerprintKey("ours")).Result()
		require.NoError(t, err)
		assert.NotEmpty(t, fp)
		assert.Positive(t, rdb.TTL(ctx, jobs.IdempotencyFingerprintKey("ours")).Val())
		again, err := st.Create(ctx, nj)
		require.NoError(t, err)
		assert.Equal(t, jobs.Created{ID: a.ID, Duplicate: true, Status: jobs.Queued}, again)
		other := nj
		other.Fingerprint = "f2"
		_, err = st.Create(ctx, other)
		assert.ErrorIs(t, err, jobs.ErrIdempotencyConflict)
	})

	t.Run("another gateway's record", func(t *testing.T) {
		foreign, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
		require.NoError(t, err)
		require.NoError(t, rdb.Set(ctx, jobs.IdempotencyKey("theirs"), foreign.ID, 0).Err())
		n := nj
		n.IdempotencyKey = "theirs"
		got, err := st.Create(ctx, n)
		require.NoError(t, err, "a contract-form record without a fingerprint replays")
		assert.Equal(t, jobs.Created{ID: foreign.ID, Duplicate: true, Status: jobs.Queued}, got)
	})

	t.Run("former JSON record", func(t *testing.T) {
		old, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
		require.NoError(t, err)
		rec, _ := json.Marshal(map[string]string{"job_id": old.ID, "fingerprint": "f1"})
		require.NoError(t, rdb.Set(ctx, jobs.IdempotencyKey("legacy"), rec, 0).Err())
		n := nj
		n.IdempotencyKey = "legacy"
		got, err := st.Create(ctx, n)
		require.NoError(t, err)
		assert.Equal(t, jobs.Created{ID: old.ID, Duplicate: true, Status: jobs.Queued}, got)
		n.Fingerprint = "f2"
		_, err = st.Create(ctx, n)
		assert.ErrorIs(t, err, jobs.ErrIdempotencyConflict)
	})

	t.Run("unreadable record", func(t *testing.T) {
		require.NoError(t, rdb.Set(ctx, jobs.IdempotencyKey("junk"), "not a job id", 0).Err())
		n := nj
		n.IdempotencyKey = "junk"
		_, err := st.Create(ctx, n)
		assert.ErrorIs(t, err, jobs.ErrIdempotencyConflict)
	})
}

// A record naming a job that is gone is free for the next request, which
// takes it for its new job; Replay (which writes nothing) finds no job.
func TestIdempotencyRecordOfVanishedJob(t *testing.T) {
	testsvc.EachRedis(t, testIdempotencyRecordOfVanishedJob)
}

func testIdempotencyRecordOfVanishedJob(t *testing.T) {
	st, rdb := newStore(t)
	ctx := context.Background()
	nj := jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60, IdempotencyKey: "k", Fingerprint: "f1"}
	a, err := st.Create(ctx, nj)
	require.NoError(t, err)
	require.NoError(t, rdb.Del(ctx, jobs.JobKey(a.ID)).Err())

	_, ok, err := st.Replay(ctx, "k", "f1")
	require.NoError(t, err)
	assert.False(t, ok, "nothing to replay")

	other := nj
	other.Fingerprint = "f2"
	b, err := st.Create(ctx, other)
	require.NoError(t, err)
	assert.False(t, b.Duplicate)
	assert.NotEqual(t, a.ID, b.ID)
	assert.Equal(t, b.ID, rdb.Get(ctx, jobs.IdempotencyKey("k")).Val())
	assert.Equal(t, "f2", rdb.Get(ctx, jobs.IdempotencyFingerprintKey("k")).Val())
	assert.Positive(t, rdb.TTL(ctx, jobs.IdempotencyKey("k")).Val())
	_, err = st.Create(ctx, nj)
	assert.ErrorIs(t, err, jobs.ErrIdempotencyConflict, "the key now holds the new request")

	// The same for a record in the former JSON form.
	rec, _ := json.Marshal(map[string]string{"job_id": a.ID, "fingerprint": "f1"})
	require.NoError(t, rdb.Set(ctx, jobs.IdempotencyKey("legacy"), rec, 0).Err())
	l := nj
	l.IdempotencyKey = "legacy"
	c, err := st.Create(ctx, l)
	require.NoError(t, err)
	assert.False(t, c.Duplicate)
	assert.Equal(t, c.ID, rdb.Get(ctx, jobs.IdempotencyKey("legacy")).Val())
}

// A job's TTL runs from its last event, so a job that keeps working outlives
// the TTL it was created with; its idempotency record must live as long, or
// a retry while the job still runs would create a second job.
func TestIdempotencyRecordLivesAsLongAsItsJob(t *testing.T) {
	testsvc.EachRedis(t, testIdempotencyRecordLivesAsLongAsItsJob)
}

func testIdempotencyRecordLivesAsLongAsItsJob(t *testing.T) {
	st, rdb := newStore(t)
	ctx := context.Background()
	nj := jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60, IdempotencyKey: "long", Fingerprint: "f1"}
	a, err := st.Create(ctx, nj)
	require.NoError(t, err)
	records := []string{jobs.IdempotencyKey("long"), jobs.IdempotencyFingerprintKey("long")}
	age := func() {
		// 55 of the 60 seconds have passed since the job was created.
		for _, k := range records {
			require.True(t, rdb.Expire(ctx, k, 5*time.Second).Val())
		}
	}
	for _, step := range []func() error{
		func() error { _, err := st.SetRunning(ctx, a.ID, "w", nil); return err },
		func() error { _, err := st.AppendEvent(ctx, a.ID, "delta", "w", json.RawMessage(`{}`)); return err },
		func() error {
			_, err := st.Finish(ctx, a.ID, jobs.Done, "w", json.RawMessage(`{}`), nil, "")
			return err
		},
	} {
		age()
		require.NoError(t, step())
		for _, k := range records {
			assert.InDelta(t, 60, rdb.TTL(ctx, k).Val().Seconds(), 2, "%s not refreshed with its job", k)
		}
		assert.InDelta(t, 60, rdb.TTL(ctx, jobs.JobKey(a.ID)).Val().Seconds(), 2)
	}
	again, err := st.Create(ctx, nj)
	require.NoError(t, err)
	assert.Equal(t, jobs.Created{ID: a.ID, Duplicate: true, Status: jobs.Done}, again)

	assert.Equal(t, "1", rdb.HGet(ctx, jobs.JobKey(a.ID), jobs.HasIdempotencyField).Val())

	// A job created without a key refreshes nothing of another's, and
	// its writes do not look for a record: even one that named it (which
	// no create writes) is left to expire.
	plain, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
	require.NoError(t, err)
	assert.Equal(t, "0", rdb.HGet(ctx, jobs.JobKey(plain.ID), jobs.HasIdempotencyField).Val())
	require.NoError(t, rdb.Set(ctx, jobs.IdempotencyJobKey(plain.ID), "long", 5*time.Second).Err())
	require.NoError(t, rdb.Set(ctx, jobs.IdempotencyKey("long"), plain.ID, 5*time.Second).Err())
	age()
	_, err = st.SetRunning(ctx, plain.ID, "w", nil)
	require.NoError(t, err)
	for _, k := range append(records, jobs.IdempotencyJobKey(plain.ID)) {
		assert.LessOrEqual(t, rdb.TTL(ctx, k).Val().Seconds(), 5.0, k)
	}
}

// A job hash written before HasIdempotencyField existed has no such field:
// its writes look the record up as they always did and keep it alive.
func TestIdempotencyRecordOfAnEarlierVersionsJob(t *testing.T) {
	testsvc.EachRedis(t, testIdempotencyRecordOfAnEarlierVersionsJob)
}

func testIdempotencyRecordOfAnEarlierVersionsJob(t *testing.T) {
	st, rdb := newStore(t)
	ctx := context.Background()
	a, err := st.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60, IdempotencyKey: "old", Fingerprint: "f1"})
	require.NoError(t, err)
	require.NoError(t, rdb.HDel(ctx, jobs.JobKey(a.ID), jobs.HasIdempotencyField).Err())
	records := []string{jobs.IdempotencyKey("old"), jobs.IdempotencyFingerprintKey("old"), jobs.IdempotencyJobKey(a.ID)}
	for _, k := range records {
		require.True(t, rdb.Expire(ctx, k, 5*time.Second).Val())
	}
	_, err = st.SetRunning(ctx, a.ID, "w", nil)
	require.NoError(t, err)
	for _, k := range records {
		assert.InDelta(t, 60, rdb.TTL(ctx, k).Val().Seconds(), 2, "%s not refreshed with its job", k)
	}
}
