package outbox

import (
	"embed"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

//go:embed migrations/postgres/*.sql migrations/sqlite/*.sql
var migrationFiles embed.FS

// Migrations are the dispatcher's additions to the central schema (a
// redrive timestamp, the dead-letter index, and on Postgres the insert
// trigger that feeds LISTEN/NOTIFY). Apply them after schema.Migrations().
func Migrations() sqldb.Migrations {
	return sqldb.Embedded(migrationFiles)
}

// NotifyChannel is the Postgres channel new events are announced on.
const NotifyChannel = "euterpe_outbox"
