package daemon

import (
	"errors"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MountMetrics adds GET /metrics: the Prometheus text exposition of reg,
// which gains the Go runtime and process collectors here (unless already
// registered). Components register their own series on the same registry;
// a private registry (not the global default) keeps tests independent. A
// collector that fails is left out of that scrape; the others are served.
func MountMetrics(e *echo.Echo, reg *prometheus.Registry) {
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		var are prometheus.AlreadyRegisteredError
		if err := reg.Register(c); err != nil && !errors.As(err, &are) {
			panic(err) // only a programming error (conflicting descriptors) gets here
		}
	}
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorHandling: promhttp.ContinueOnError})
	e.GET("/metrics", echo.WrapHandler(h))
}
