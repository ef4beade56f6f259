package ingest_test

import (
	"testing"

	"github.com/vesta-cx/euterpe/central/schema"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
	"github.com/vesta-cx/euterpe/sync/ingest"
)

func TestMigrationsApplyOnBothEngines(t *testing.T) {
	sqltest.Each(t, []sqldb.Migrations{schema.Migrations(), ingest.Migrations()}, func(t *testing.T, db *sqldb.DB) {
		for _, table := range []string{"edges", "edge_events", "edge_jobs", "edge_gaps"} {
			var n int
			if err := db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil || n != 0 {
				t.Fatalf("%s: %d %v", table, n, err)
			}
		}
	})
}
