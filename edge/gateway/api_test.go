package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/gateway"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

type apiError struct {
	Error struct{ Code, Message string } `json:"error"`
}

func errorCode(t *testing.T, body string) string {
	t.Helper()
	var e apiError
	require.NoError(t, json.Unmarshal([]byte(body), &e), body)
	return e.Error.Code
}

// assertNothingWritten checks no job, event stream, idempotency record or
// queue entry exists.
func assertNothingWritten(t *testing.T, s *server) {
	t.Helper()
	ctx := context.Background()
	keys := s.RDB.Keys(ctx, "*").Val()
	for _, k := range keys {
		assert.Equal(t, jobs.QueueStream, k, "unexpected key written")
	}
	assert.EqualValues(t, 0, s.RDB.XLen(ctx, jobs.QueueStream).Val())
}

func TestCreateRejectsBadInput(t *testing.T) { testsvc.EachRedis(t, testCreateRejectsBadInput) }

func testCreateRejectsBadInput(t *testing.T) {
	set := testSettings()
	set.MaxBodyBytes = 2048
	s := startServer(t, set)
	tests := []struct {
		name   string
		body   string
		hdr    map[string]string
		status int
		code   string
	}{
		{"malformed json", `{"task":`, nil, 400, "invalid_json"},
		{"empty body", ``, nil, 400, "invalid_json"},
		{"array body", `[1,2]`, nil, 400, "invalid_json"},
		{"trailing data", `{"task":"chat","payload":{}} {}`, nil, 400, "invalid_json"},
		{"missing task", `{"payload":{}}`, nil, 400, "missing_field"},
		{"null task", `{"task":null,"payload":{}}`, nil, 400, "missing_field"},
		{"missing payload", `{"task":"chat"}`, nil, 400, "missing_field"},
		{"task not a string", `{"task":7,"payload":{}}`, nil, 400, "invalid_field"},
		{"unknown task", `{"task":"dance","payload":{}}`, nil, 400, "unknown_task"},
		{"unknown field", `{"task":"chat","payload":{},"prio":1}`, nil, 400, "unknown_field"},
		// Field names are the contract's, to the letter, each given once.
		{"task in upper case", `{"TASK":"chat","payload":{}}`, nil, 400, "unknown_field"},
		{"payload capitalised", `{"task":"chat","Payload":{}}`, nil, 400, "unknown_field"},
		{"ttl_s in upper case", `{"task":"chat","payload":{},"TTL_S":60}`, nil, 400, "unknown_field"},
		{"second task in another case", `{"task":"chat","payload":{},"Task":"plan"}`, nil, 400, "unknown_field"},
		{"task twice", `{"task":"chat","payload":{},"task":"plan"}`, nil, 400, "invalid_json"},
		{"payload twice", `{"task":"chat","payload":{"a":1},"payload":{"b":2}}`, nil, 400, "invalid_json"},
		{"payload array", `{"task":"chat","payload":[1]}`, nil, 400, "invalid_payload"},
		{"payload string", `{"task":"chat","payload":"x"}`, nil, 400, "invalid_payload"},
		{"payload null", `{"task":"chat","payload":null}`, nil, 400, "invalid_payload"},
		{"payload not UTF-8", "{\"task\":\"chat\",\"payload\":{\"prompt\":\"caf\xe9\"}}", nil, 400, "invalid_payload"},
		{"ttl zero", `{"task":"chat","payload":{},"ttl_s":0}`, nil, 400, "invalid_ttl"},
		{"ttl negative", `{"task":"chat","payload":{},"ttl_s":-5}`, nil, 400, "invalid_ttl"},
		{"ttl fraction", `{"task":"chat","payload":{},"ttl_s":1.5}`, nil, 400, "invalid_ttl"},
		{"ttl string", `{"task":"chat","payload":{},"ttl_s":"60"}`, nil, 400, "invalid_ttl"},
		{"ttl too large", `{"task":"chat","payload":{},"ttl_s":999999999}`, nil, 400, "invalid_ttl"},
		{"body over cap", `{"task":"chat","payload":{"x":"` + strings.Repeat("a", 4096) + `"}}`, nil, 413, "body_too_large"},
		{"bad idempotency key", `{"task":"chat","payload":{}}`, map[string]string{"Idempotency-Key": "has space"}, 400, "invalid_idempotency_key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := s.post(t, "/v1/jobs", tt.body, tt.hdr)
			assert.Equal(t, tt.status, resp.StatusCode, body)
			assert.Equal(t, tt.code, errorCode(t, body))
			assertNothingWritten(t, s)
		})
	}
}

func TestCreateAndGet(t *testing.T) { testsvc.EachRedis(t, testCreateAndGet) }

func testCreateAndGet(t *testing.T) {
	s := startServer(t, testSettings())
	resp, body := s.post(t, "/v1/jobs", `{"task":"embed","payload":{"text":"hi","n":[1,2]},"ttl_s":90}`, nil)
	require.Equal(t, http.StatusAccepted, resp.StatusCode, body)
	var cr struct{ JobID, Status string }
	require.NoError(t, json.Unmarshal([]byte(body), &struct {
		JobID  *string `json:"job_id"`
		Status *string `json:"status"`
	}{&cr.JobID, &cr.Status}))
	assert.Equal(t, "queued", cr.Status)

	resp, body = s.get(t, "/v1/jobs/"+cr.JobID)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var j map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &j))
	assert.Equal(t, map[string]any{"text": "hi", "n": []any{1.0, 2.0}}, j["payload"])
	assert.Equal(t, "embed", j["task"])
	assert.Equal(t, 90.0, j["ttl_s"])
	assert.Nil(t, j["result"])

	for _, path := range []string{"/v1/jobs/6f1c1a2e-0000-4000-8000-000000000000", "/v1/jobs/not-a-uuid",
		"/v1/jobs/6f1c1a2e-0000-4000-8000-000000000000/events"} {
		resp, body = s.get(t, path)
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, path)
		assert.Equal(t, "not_found", errorCode(t, body))
	}
}

func TestIdempotencyKey(t *testing.T) { testsvc.EachRedis(t, testIdempotencyKey) }

func testIdempotencyKey(t *testing.T) {
	s := startServer(t, testSettings())
	hdr := map[string]string{"Idempotency-Key": "order-1"}
	body := `{"task":"chat","payload":{"q":"a"}}`
	r1, b1 := s.post(t, "/v1/jobs", body, hdr)
	r2, b2 := s.post(t, "/v1/jobs", `{ "task": "chat", "payload": {"q": "a"} }`, hdr)
	require.Equal(t, 202, r1.StatusCode)
	require.Equal(t, 202, r2.StatusCode)
	assert.JSONEq(t, b1, b2)

	r3, b3 := s.post(t, "/v1/jobs", `{"task":"chat","payload":{"q":"b"}}`, hdr)
	assert.Equal(t, http.StatusConflict, r3.StatusCode)
	assert.Equal(t, "idempotency_conflict", errorCode(t, b3))
	assert.EqualValues(t, 1, s.RDB.XLen(context.Background(), jobs.QueueStream).Val())

	var wg sync.WaitGroup
	ids := make([]string, 16)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, b := s.post(t, "/v1/jobs", body, map[string]string{"Idempotency-Key": "concurrent"})
			assert.Equal(t, 202, resp.StatusCode)
			var cr struct {
				JobID string `json:"job_id"`
			}
			_ = json.Unmarshal([]byte(b), &cr)
			ids[i] = cr.JobID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		assert.Equal(t, ids[0], id)
	}
	assert.EqualValues(t, 2, s.RDB.XLen(context.Background(), jobs.QueueStream).Val())
	assert.Len(t, s.RDB.Keys(context.Background(), "job:*:events").Val(), 2)
}

func TestCancel(t *testing.T) { testsvc.EachRedis(t, testCancel) }

func testCancel(t *testing.T) {
	s := startServer(t, testSettings())
	ctx := context.Background()
	c, err := s.Store.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
	require.NoError(t, err)
	_, err = s.Store.SetRunning(ctx, c.ID, "worker.start", nil)
	require.NoError(t, err)

	resp, body := s.post(t, "/v1/jobs/"+c.ID+"/cancel", "", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.JSONEq(t, `{"job_id":"`+c.ID+`","status":"canceled"}`, body)
	j, err := s.Store.Get(ctx, c.ID)
	require.NoError(t, err)
	assert.Equal(t, jobs.Canceled, j.Status)
	evs, err := s.Store.Events(ctx, c.ID, "0", 10)
	require.NoError(t, err)
	assert.Equal(t, "canceled", evs[len(evs)-1].Type)

	resp, body = s.post(t, "/v1/jobs/"+c.ID+"/cancel", "", nil)
	assert.Equal(t, http.StatusConflict, resp.StatusCode)
	assert.Equal(t, "job_finished", errorCode(t, body))

	d, err := s.Store.Create(ctx, jobs.NewJob{Task: "chat", Payload: json.RawMessage(`{}`), TTL: 60})
	require.NoError(t, err)
	_, err = s.Store.SetRunning(ctx, d.ID, "w", nil)
	require.NoError(t, err)
	_, err = s.Store.Finish(ctx, d.ID, jobs.Done, "w", json.RawMessage(`{}`), nil, "")
	require.NoError(t, err)
	resp, _ = s.post(t, "/v1/jobs/"+d.ID+"/cancel", "", nil)
	assert.Equal(t, http.StatusConflict, resp.StatusCode)

	resp, body = s.post(t, "/v1/jobs/6f1c1a2e-0000-4000-8000-000000000000/cancel", "", nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Equal(t, "not_found", errorCode(t, body))
}

func TestBackpressure(t *testing.T) { testsvc.EachRedis(t, testBackpressure) }

func testBackpressure(t *testing.T) {
	set := testSettings()
	set.BacklogLimit = 3
	set.RetryAfter = 7
	s := startServer(t, set)
	for range 4 {
		resp, body := s.post(t, "/v1/jobs", `{"task":"chat","payload":{}}`, nil)
		require.Equal(t, 202, resp.StatusCode, body)
	}
	resp, body := s.post(t, "/v1/jobs", `{"task":"chat","payload":{}}`, nil)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "7", resp.Header.Get("Retry-After"))
	assert.Equal(t, "backlog_full", errorCode(t, body))
	assert.EqualValues(t, 4, s.RDB.XLen(context.Background(), jobs.QueueStream).Val())

	// A retry of a request the gateway accepted still gets its job; a new
	// key, or the key with another body, does not get past the full backlog.
	cases := []struct {
		name, key, body string
		status          int
		code            string
	}{
		{"retry of an accepted request", "accepted-before", `{"task":"chat","payload":{}}`, http.StatusAccepted, ""},
		{"same key, another body", "accepted-before", `{"task":"chat","payload":{"q":1}}`, http.StatusConflict, "idempotency_conflict"},
		{"new key", "never-seen", `{"task":"chat","payload":{}}`, http.StatusTooManyRequests, "backlog_full"},
	}
	ctx := context.Background()
	accepted, err := s.Store.Create(ctx, jobs.NewJob{Task: "chat", Payload: []byte(`{}`), TTL: 60,
		IdempotencyKey: "accepted-before", Fingerprint: fingerprintOf(t, `{"task":"chat","payload":{}}`)})
	require.NoError(t, err)
	for _, tc := range cases {
		resp, body := s.post(t, "/v1/jobs", tc.body, map[string]string{"Idempotency-Key": tc.key})
		assert.Equal(t, tc.status, resp.StatusCode, "%s: %s", tc.name, body)
		if tc.code != "" {
			assert.Equal(t, tc.code, errorCode(t, body), tc.name)
			continue
		}
		assert.JSONEq(t, `{"job_id":"`+accepted.ID+`","status":"queued"}`, body, tc.name)
	}
	assert.EqualValues(t, 5, s.RDB.XLen(ctx, jobs.QueueStream).Val(), "nothing queued past the full backlog")
}

// fingerprintOf is the fingerprint the gateway computes for a create body.
func fingerprintOf(t *testing.T, body string) string {
	t.Helper()
	req, err := gateway.ParseCreate([]byte(body), 0)
	require.NoError(t, err)
	return req.Fingerprint()
}

// A retry whose Idempotency-Key another gateway of the edge streams contract
// recorded (idempotency:{key} = job id) gets that job, not 409; the record
// this gateway writes is the job id a foreign gateway expects.
func TestIdempotencyKeyContractRecord(t *testing.T) {
	testsvc.EachRedis(t, testIdempotencyKeyContractRecord)
}

func testIdempotencyKeyContractRecord(t *testing.T) {
	s := startServer(t, testSettings())
	ctx := context.Background()
	foreign := newJob(t, s)
	require.NoError(t, s.RDB.Set(ctx, jobs.IdempotencyKey("from-elsewhere"), foreign, time.Minute).Err())
	resp, body := s.post(t, "/v1/jobs", `{"task":"chat","payload":{"q":"a"}}`, map[string]string{"Idempotency-Key": "from-elsewhere"})
	require.Equal(t, http.StatusAccepted, resp.StatusCode, body)
	assert.JSONEq(t, `{"job_id":"`+foreign+`","status":"queued"}`, body)

	resp, body = s.post(t, "/v1/jobs", `{"task":"chat","payload":{"q":"a"}}`, map[string]string{"Idempotency-Key": "ours"})
	require.Equal(t, http.StatusAccepted, resp.StatusCode, body)
	var cr struct {
		JobID string `json:"job_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &cr))
	assert.Equal(t, cr.JobID, s.RDB.Get(ctx, jobs.IdempotencyKey("ours")).Val())
}
