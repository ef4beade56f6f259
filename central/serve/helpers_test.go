package serve_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"

	"github.com/google/uuid"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/central/serve/servetest"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// started is serve running in the test process.
type started struct {
	base string // http://host:port of the API
	deps *serve.Deps
	logs *testsvc.LogBuffer
}

// serveEnv is the environment of a serve on engine with a fresh database,
// state directory and keyring, listening on a free port; extra adds to it.
func serveEnv(t *testing.T, engine sqldb.Engine, extra map[string]string) map[string]string {
	env := map[string]string{
		"EUTERPE_DATABASE_URL": sqltest.URL(t, engine),
		"EUTERPE_STATE_DIR":    t.TempDir(),
		"EUTERPE_KEYRING":      "k1:" + credentials.NewKey(),
		"EUTERPE_CENTRAL_ADDR": "127.0.0.1:0",
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// startServe parses app's settings from env and args the way the program
// does, opens the database and runs serve until the test ends.
func startServe(t *testing.T, app *serve.App, env map[string]string, args []string) *started {
	t.Helper()
	s := servetest.Start(t, app, env, args)
	return &started{base: s.Base, deps: s.Deps, logs: s.Logs}
}

// postJob sends job to POST /transcode as apiKey with a fresh
// Idempotency-Key and returns the status code and body.
func (st *started) postJob(t *testing.T, apiKey string, job map[string]any) (int, []byte) {
	t.Helper()
	body, _ := json.Marshal(job)
	req, _ := http.NewRequest(http.MethodPost, st.base+"/transcode", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Idempotency-Key", uuid.NewString())
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// waitFor polls cond until it holds, failing the test after 15 s.
func (st *started) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: timed out; log:\n%s", what, st.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
