package runner_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/vesta-cx/euterpe/central/api"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/idempotency"
	"github.com/vesta-cx/euterpe/daemon"
)

// apiURL serves the real central HTTP API on the test's database.
func (e *env) apiURL() string {
	if e.api != "" {
		return e.api
	}
	log := slog.New(slog.DiscardHandler)
	ec := daemon.NewEcho(log)
	api.New(api.Config{DB: e.db, Inbox: e.inbox, Requesters: e.req, Idempotency: idempotency.New(e.db, time.Hour, time.Now), Log: log}).Mount(ec)
	srv := httptest.NewServer(ec)
	e.t.Cleanup(srv.Close)
	e.api = srv.URL
	return e.api
}

// sendCredentials is what the test requester does on a refresh call: PUT
// new credentials for the job through euterpe's API with its API key.
func (e *env) sendCredentials(jobID string, c credentials.Storage) error {
	body, _ := json.Marshal(map[string]any{
		"source": map[string]any{"credentials": c.Source},
		"output": map[string]any{"credentials": c.Output},
	})
	req, _ := http.NewRequest(http.MethodPut, e.apiURL()+"/transcode/credentials?job_id="+jobID, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+e.requester.APIKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PUT /transcode/credentials: HTTP %d", resp.StatusCode)
	}
	return nil
}

// post enqueues a job through POST /transcode with the requester's API key
// and returns its id.
func (e *env) post(body map[string]any) string {
	e.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, e.apiURL()+"/transcode", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+e.requester.APIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", fmt.Sprintf("k-%d", time.Now().UnixNano()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	var acc api.Accepted
	if err := json.NewDecoder(resp.Body).Decode(&acc); err != nil || resp.StatusCode != http.StatusAccepted {
		e.t.Fatalf("POST /transcode: HTTP %d %v", resp.StatusCode, err)
	}
	return acc.JobID
}
