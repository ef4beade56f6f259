package main

import (
	"context"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/console"
)

func init() {
	var s struct {
		On    bool
		Every time.Duration
	}
	register(Plugin{
		Name: "console",
		Settings: func(cfg *daemon.Config) {
			cfg.Bool(&s.On, "console", "EUTERPE_CONSOLE", true, "serve the web console at /ui/ on the API's address")
			cfg.Duration(&s.Every, "console-history-interval", "EUTERPE_CONSOLE_HISTORY_INTERVAL", 10*time.Second, time.Second, 5*time.Minute,
				"sampling interval of the console's charts (the last hour is kept in memory)")
		},
		Build: func(ctx context.Context, d Deps) (Component, error) {
			if !s.On {
				return noComponent{}, nil
			}
			// The library plugin is built after this one; Parts is read at
			// request time.
			parts := d.Parts
			return console.New(console.Deps{
				Log: d.Log.With("component", "console"), Jobs: d.Jobs, Metrics: d.Metrics, HistoryEvery: s.Every,
				Library: parts.library, LibraryState: parts.libraryState,
			})
		},
	})
}

// libraryState tells the console a library with roots whose database is
// not open yet from one without roots.
func (p *Parts) libraryState() console.LibraryState {
	st := console.LibraryState{Configured: p.Library != nil}
	if st.Configured && p.LibraryErr != nil {
		st.OpenErr = p.LibraryErr()
	}
	return st
}
