package daemon_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vesta-cx/euterpe/daemon"
)

func TestMountMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "euterpe_test_things_total", Help: "Things."})
	reg.MustRegister(c)
	c.Add(3)
	e := daemon.NewEcho(slog.New(slog.DiscardHandler))
	daemon.MountMetrics(e, reg)
	daemon.MountMetrics(e, reg) // idempotent on the collectors
	srv := httptest.NewServer(e)
	defer srv.Close()
	res, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d", res.StatusCode)
	}
	for _, want := range []string{"euterpe_test_things_total 3", "go_goroutines ", "process_start_time_seconds "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
