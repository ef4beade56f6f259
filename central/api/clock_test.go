package api_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/central/api"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/idempotency"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/central/requesters"
	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// TestFirstEnqueueDoesNotWaitForTheClockMeasurement: wired as serve wires
// it (the idempotency store on the inbox's clock, which was never
// measured), the first POST /transcode of a pod reserves its key and
// inserts its job in one transaction. The first reading of the database
// clock must be taken on that transaction: on a connection of its own it
// would wait for the one the transaction holds (a pool of one here, a pool
// every request holds a transaction of in production) until its timeout,
// and the key would expire by this process's clock. On SQLite the clock is
// read without a connection; there the test guards the path against a
// later change.
func TestFirstEnqueueDoesNotWaitForTheClockMeasurement(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		keys, err := credentials.ParseKeyring("k1:"+credentials.NewKey(), "")
		if err != nil {
			t.Fatal(err)
		}
		in := inbox.New(db, keys, inbox.DefaultPolicy())
		reqs := requesters.New(db, keys)
		owner, err := reqs.Create(ctx, "r")
		if err != nil {
			t.Fatal(err)
		}
		log := slog.New(slog.NewJSONHandler(io.Discard, nil))
		e := daemon.NewEcho(log)
		api.New(api.Config{DB: db, Inbox: in, Requesters: reqs, Idempotency: idempotency.New(db, time.Hour, in.Now), Log: log}).Mount(e)
		srv := httptest.NewServer(e)
		defer srv.Close()
		if db.Engine == sqldb.Postgres {
			db.SetMaxOpenConns(1)
			defer db.SetMaxOpenConns(0)
		}
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/transcode", strings.NewReader(js(validBody())))
		req.Header.Set("Authorization", "Bearer "+owner.APIKey)
		req.Header.Set("Idempotency-Key", "first")
		start := time.Now()
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		// Waiting for its own connection, it gives up after 5 s.
		if took := time.Since(start); took > 4*time.Second {
			t.Fatalf("the first enqueue took %v: it measured the clock inside its transaction", took)
		}
		if res.StatusCode != http.StatusAccepted {
			t.Fatalf("HTTP %d %s", res.StatusCode, body)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM idempotency_keys WHERE idem_key = 'first'`); n != 1 {
			t.Fatalf("%d keys recorded", n)
		}
	})
}
