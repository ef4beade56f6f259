package main

import (
	"context"

	"github.com/vesta-cx/euterpe/edge/library"
)

func init() {
	var s library.Settings
	register(Plugin{
		Name:     "library",
		Settings: s.Register,
		Build: func(ctx context.Context, d Deps) (Component, error) {
			l, err := library.New(ctx, d.Log, d.StateDir, d.WorkerID, s)
			if err == nil && s.Roots != "" {
				d.Parts.Library = l // its counts go into the sync heartbeat
			}
			if err != nil {
				return nil, err
			}
			return libraryComponent{l}, nil
		},
	})
}

// libraryComponent is the library as a component; its Run closes the
// database when it ends, Close does for a library that never ran.
type libraryComponent struct {
	*library.Library
}

// Close releases the database of a library that never ran.
func (l libraryComponent) Close() error { return l.Store.Close() }
