package ingest

import (
	"embed"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

//go:embed migrations/postgres/*.sql migrations/sqlite/*.sql
var migrationFiles embed.FS

// Migrations add the sync tables (edges, edge_events, edge_jobs,
// edge_gaps) to the central schema; versions 00300-00399 are this
// package's.
func Migrations() sqldb.Migrations {
	return sqldb.Embedded(migrationFiles)
}
