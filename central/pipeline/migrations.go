package pipeline

import (
	"embed"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

//go:embed migrations/postgres/*.sql migrations/sqlite/*.sql
var migrationFiles embed.FS

// Migrations add the pipeline tables (pipeline_jobs, the schedule marks and
// the sealed storage credentials) to the central schema; versions
// 00400-00499 are this package's.
func Migrations() sqldb.Migrations {
	return sqldb.Embedded(migrationFiles)
}
