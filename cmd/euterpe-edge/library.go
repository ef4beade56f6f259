package main

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vesta-cx/euterpe/edge/library"
)

func init() {
	var s library.Settings
	register(Plugin{
		Name:     "library",
		Settings: s.Register,
		Build: func(ctx context.Context, d Deps) (Component, error) {
			// A setting error stops the start; a database that cannot be
			// opened (a full disk, a read-only state directory) does not:
			// the jobs run while the library retries the open.
			o, err := library.NewOpening(ctx, d.Log.With("component", "library"), d.StateDir, d.WorkerID, s)
			if err != nil {
				return nil, err
			}
			if s.Roots != "" {
				d.Parts.Library = o.Library // its counts go into the sync heartbeat
				d.Parts.LibraryErr = o.Err  // the console says why it is not open
			}
			if d.Metrics != nil {
				open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "euterpe_edge_library_open",
					Help: "1 once the library database is open; 0 while it cannot be opened (its routes answer 503, jobs run as usual)."},
					func() float64 {
						if o.Library() != nil {
							return 1
						}
						return 0
					})
				if err := d.Metrics.Register(open); err != nil {
					o.Close()
					return nil, fmt.Errorf("library metrics: %w", err)
				}
			}
			return o, nil
		},
	})
}
