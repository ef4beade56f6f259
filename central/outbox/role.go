package outbox

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
)

// RoleName is the dispatcher's name in EUTERPE_CENTRAL_ROLES.
const RoleName = "dispatcher"

// role is the dispatcher as a serve role; serve wakes it (Wake) after every
// commit that wrote outbox events.
type role struct{ *Dispatcher }

func (role) Name() string { return RoleName }

// Definition registers the dispatcher with euterpe-central serve: on by
// default in every pod, with its EUTERPE_OUTBOX_* settings.
func Definition() serve.Definition {
	cfg := Defaults()
	return serve.Definition{
		Name:      RoleName,
		DefaultOn: true,
		Settings: func(c *daemon.Config) {
			cfg.Bind(c)
			// Relations between settings (lease TTL vs timeout, …) are
			// checked with the others, before serve touches disk or database.
			c.Check(func() error { return cfg.Validate() })
		},
		New: func(d *serve.Deps) (serve.Role, error) {
			cfg := cfg
			// The address policy is the process's, shared with the API and
			// the runner (EUTERPE_WEBHOOK_ALLOW_PRIVATE is a serve setting).
			cfg.AllowPrivate = d.Policy.AllowPrivate
			disp, err := New(cfg, Options{
				Store:   NewStore(d.DB, nil),
				Secrets: &RequesterSecrets{Requesters: d.Requesters},
				Worker:  d.WorkerID,
				Log:     d.Log.With("role", RoleName),
				Metrics: NewMetrics(registerer(d)),
			})
			if err != nil {
				return nil, err
			}
			return role{disp}, nil
		},
	}
}

// registerer is the serve registry the dispatcher's series are exported on
// (euterpe_outbox_dead_letter_total among them), nil when there is none.
func registerer(d *serve.Deps) prometheus.Registerer {
	if d.Metrics == nil {
		return nil
	}
	return d.Metrics
}
