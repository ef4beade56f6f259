package main

import (
	"context"

	"github.com/vesta-cx/euterpe/edge/library"
)

// builtLibrary is the library when it has roots to scan, for the sync
// heartbeat's counts; plugins build in registration order (file order),
// library before sync.
var builtLibrary *library.Library

func init() {
	var s library.Settings
	register(Plugin{
		Name:     "library",
		Settings: s.Register,
		Build: func(ctx context.Context, d Deps) (Component, error) {
			l, err := library.New(ctx, d.Log, d.StateDir, d.WorkerID, s)
			if err == nil && s.Roots != "" {
				builtLibrary = l // its counts go into the sync heartbeat
			}
			return l, err
		},
	})
}
