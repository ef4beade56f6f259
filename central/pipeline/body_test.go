package pipeline

import (
	"net/http"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// A submit body is one JSON object and nothing after it. json.Decoder.More
// answers false before a stray '}' or ']', so that check alone let such a
// body create a job.
func TestSubmitBodyTrailingData(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		f := newFixture(t, db, nil)
		base := apiServer(t, f)
		valid := `{"job_type":"noop","symbol":"AAPL","asof":"2026-01-02"}`
		for _, tt := range []struct {
			name, body string
			status     int
		}{
			{"trailing brace", valid + `}`, http.StatusBadRequest},
			{"trailing bracket", valid + ` ]`, http.StatusBadRequest},
			{"second object", valid + `{}`, http.StatusBadRequest},
			{"trailing word", valid + ` x`, http.StatusBadRequest},
			{"trailing space", valid + " \n", http.StatusAccepted},
		} {
			t.Run(tt.name, func(t *testing.T) {
				resp, err := http.Post(base+"/v1/pipeline/jobs", "application/json", strings.NewReader(tt.body))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tt.status {
					t.Fatalf("%q: %d, want %d", tt.body, resp.StatusCode, tt.status)
				}
			})
		}
	})
}

// An external job type's answer is exactly one JSON object: a stray '}' or
// ']' after it is trailing data like any other.
func TestParseAnswerTrailingData(t *testing.T) {
	for _, tt := range []struct {
		answer string
		code   string
	}{
		{`{"result_ref":"s3://b/k"}}`, CodeInvalidAnswer},
		{`{"result_ref":"s3://b/k"}]`, CodeInvalidAnswer},
		{`{"result_ref":"s3://b/k"} {}`, CodeInvalidAnswer},
		{`{"error_code":"QUALITY_FAILED","error_message":"x"}}`, CodeInvalidAnswer},
		{"{\"result_ref\":\"s3://b/k\"}\n", ""},
	} {
		_, err := parseAnswer([]byte(tt.answer))
		if got := ErrorCode(err); got != tt.code {
			t.Errorf("%q: code %q (%v), want %q", tt.answer, got, err, tt.code)
		}
	}
}
