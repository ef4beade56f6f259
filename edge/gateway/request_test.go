package gateway

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

func TestParseCreateFingerprint(t *testing.T) {
	a, err := ParseCreate([]byte(`{"task":"chat","payload":{"a": 1}}`), 100)
	require.NoError(t, err)
	b, err := ParseCreate([]byte(` { "payload" : {"a":1}, "task":"chat" } `), 100)
	require.NoError(t, err)
	c, err := ParseCreate([]byte(`{"task":"chat","payload":{"a":1},"ttl_s":5}`), 100)
	require.NoError(t, err)
	assert.Equal(t, a.Fingerprint(), b.Fingerprint())
	assert.NotEqual(t, a.Fingerprint(), c.Fingerprint())
	assert.EqualValues(t, 5, c.TTL)
	assert.Equal(t, `{"a":1}`, string(a.Payload))
}

// FuzzParseCreate: the body parser never panics, and whatever it accepts is
// a known task, a compact JSON object payload and a TTL in range; whatever
// it rejects is a 400 APIError.
func FuzzParseCreate(f *testing.F) {
	for _, s := range []string{
		`{"task":"chat","payload":{}}`, `{"task":"rag","payload":{"q":[1,{"x":null}]},"ttl_s":60}`,
		`{"task":`, `[]`, `null`, `{"task":"chat","payload":"x"}`, `{"task":"chat","payload":{},"ttl_s":1e3}`,
		`{"task":"chat","payload":{}} x`, `{"task":"chat","payload":{},"extra":1}`, "{\"task\":\"chat\",\"payload\":{\"\xff\":1}}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := ParseCreate(body, 3600)
		if err != nil {
			ae, ok := err.(*daemon.APIError)
			if !ok || ae.Status != 400 || ae.Code == "" || len(ae.Message) > daemon.MaxMessage {
				t.Fatalf("rejection is not a 400 APIError: %#v", err)
			}
			return
		}
		if !jobs.ValidTask(req.Task) {
			t.Fatalf("accepted unknown task %q", req.Task)
		}
		var obj map[string]any
		if json.Unmarshal(req.Payload, &obj) != nil || obj == nil {
			t.Fatalf("accepted payload that is not an object: %q", req.Payload)
		}
		if req.TTL < 0 || req.TTL > 3600 {
			t.Fatalf("accepted ttl %d", req.TTL)
		}
	})
}

func TestSettingsValidate(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*Settings)
		setting string
	}{
		{"defaults", func(*Settings) {}, ""},
		{"emergency cap far above backlog", func(s *Settings) { s.QueueMaxLen = 100_000 }, ""},
		{"cap below backlog", func(s *Settings) { s.QueueMaxLen, s.BacklogLimit = 100, 10_000 }, "EUTERPE_QUEUE_MAXLEN"},
		{"cap at twice backlog", func(s *Settings) { s.QueueMaxLen, s.BacklogLimit = 20_000, 10_000 }, "EUTERPE_QUEUE_MAXLEN"},
		{"default ttl above max", func(s *Settings) { s.JobTTL, s.MaxJobTTL = 1000, 100 }, "EUTERPE_JOB_TTL_S"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := DefaultSettings()
			tc.mod(&s)
			err := s.Validate()
			if tc.setting == "" {
				require.NoError(t, err)
				return
			}
			var se *daemon.SettingError
			require.ErrorAs(t, err, &se)
			assert.Equal(t, tc.setting, se.Setting)
			assert.NotContains(t, err.Error(), "\n")
		})
	}
}
