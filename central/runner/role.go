package runner

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/central/ssrf"
	"github.com/vesta-cx/euterpe/daemon"
)

// RoleName is the runner's name in EUTERPE_CENTRAL_ROLES.
const RoleName = "runner"

// Definition registers the runner with euterpe-central serve. Its outbound
// calls (storage, refresh_url) follow the process's address policy
// (serve.Deps.Policy; EUTERPE_WEBHOOK_ALLOW_PRIVATE lifts it for
// development).
func Definition() serve.Definition {
	var set *Settings
	return serve.Definition{
		Name:      RoleName,
		Executes:  true,
		DefaultOn: true,
		Settings:  func(c *daemon.Config) { set = Bind(c) },
		New: func(d *serve.Deps) (serve.Role, error) {
			s := DefaultSettings()
			if set != nil {
				s = *set
			}
			policy := d.Policy
			r, err := New(Options{
				Jobs: d.Inbox, Secrets: d.Requesters, Settings: s, WorkerID: d.WorkerID, Logger: d.Log,
				RefreshClient: policy.NewClient(ssrf.ClientOptions{Timeout: 15 * time.Second}),
				StorageDial:   policy.DialContext,
				Metrics:       NewMetrics(registerer(d)),
			})
			if err != nil {
				return nil, err
			}
			return role{r}, nil
		},
	}
}

// role adapts a Runner to serve.Role and serve.ReadinessReporter.
type role struct{ r *Runner }

func (role) Name() string { return RoleName }

func (x role) Run(ctx context.Context) error {
	defer x.r.Close()
	return x.r.Run(ctx)
}

// Close releases the scratch area of a runner serve built but never ran
// (serve.Closer); Run releases it otherwise.
func (x role) Close() error { return x.r.Close() }

func (x role) ReadyChecks() []daemon.Check { return x.r.Checks() }

// registerer is the serve registry the runner's series are exported on,
// nil when there is none.
func registerer(d *serve.Deps) prometheus.Registerer {
	if d.Metrics == nil {
		return nil
	}
	return d.Metrics
}
