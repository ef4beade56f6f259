package ingest

import (
	"net/http"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/sync/wire"
)

// FuzzBatchBody: a correctly signed batch whose decompressed body is
// anything at all is answered below 500 and never panics the server. The
// body is signed as the edge would sign it, so the fuzzer gets past the
// signature to the decoder and the ingest behind it.
func FuzzBatchBody(f *testing.F) {
	db := sqltest.Open(f, sqldb.SQLite, migrations()...)
	s := startServer(f, db)
	edge, secret := s.register("fuzz")
	good, err := wire.Encode(wire.Batch{EdgeID: edge, Events: events(edge, "00000000-0000-4000-8000-000000000001", 1700000000000, "queued", "running", "done")})
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range [][]byte{good, []byte(`{}`), []byte(`{"edge_id":"x","events":[{}]}`), []byte(`[]`), []byte("\x00"), nil} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		u := signRaw(t, wire.BatchPath, edge, wire.Compress(raw), secret, time.Now())
		r := s.sendWith(t, http.DefaultClient, u)
		if r.status == 0 || r.status >= 500 {
			t.Fatalf("batch %q answered %d: %s", raw, r.status, r.body)
		}
	})
}
