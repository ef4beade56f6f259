package main

import (
	"github.com/vesta-cx/euterpe/central/console"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/outbox"
	"github.com/vesta-cx/euterpe/central/pipeline"
	"github.com/vesta-cx/euterpe/central/pipeline/pipelinerole"
	"github.com/vesta-cx/euterpe/central/runner"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/sync/ingest"
)

// register adds the roles and migration sets of the program. A role
// package contributes one serve.Definition (and, if it has one, its
// migration set) here.
func register(app *serve.App) {
	app.AddMigrations(outbox.Migrations())
	app.AddMigrations(ingest.Migrations())
	app.Register(runner.Definition())
	app.Register(outbox.Definition())
	app.Register(ingest.Definition())
	// edge_daily reads the sync tables (edges, edge_events) added above.
	app.AddMigrations(pipeline.Migrations())
	app.Register(pipelinerole.Definition())
	// The console reads every store above; it is served by the api role.
	app.Register(console.Definition())
}

func credentialsNewKey() string { return credentials.NewKey() }
