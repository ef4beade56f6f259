package console

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/vesta-cx/euterpe/daemon"
)

func TestKnownHosts(t *testing.T) {
	mw, err := KnownHosts([]string{"https://console.example.com"}, "Jetson-Lab-01")
	if err != nil {
		t.Fatal(err)
	}
	e := daemon.NewEcho(slog.New(slog.DiscardHandler))
	e.Use(mw)
	for _, p := range []string{"/v1/jobs", "/healthz", "/ready", "/metrics"} {
		e.Any(p, func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	}
	for _, tt := range []struct {
		host, path string
		want       int
	}{
		{"127.0.0.1:8070", "/v1/jobs", 204},
		{"[::1]:8070", "/v1/jobs", 204},
		{"192.168.1.20:8070", "/v1/jobs", 204}, // an IP cannot be rebound
		{"localhost:8070", "/v1/jobs", 204},
		{"app.localhost", "/v1/jobs", 204},
		{"jetson-lab-01:8070", "/v1/jobs", 204},
		{"JETSON-LAB-01.local.:8070", "/v1/jobs", 204},
		{"console.example.com", "/v1/jobs", 204},
		{"rebind.attacker.example:8070", "/v1/jobs", 421},
		{"localhost.attacker.example", "/v1/jobs", 421},
		{"", "/v1/jobs", 421},
		{"rebind.attacker.example:8070", "/healthz", 204}, // probes answer any name
		{"rebind.attacker.example:8070", "/metrics", 204},
	} {
		req := httptest.NewRequest(http.MethodPost, tt.path, nil)
		req.Host = tt.host
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		if rec.Code != tt.want {
			t.Errorf("Host %q %s: %d, want %d (%s)", tt.host, tt.path, rec.Code, tt.want, rec.Body)
		}
	}
	if _, err := KnownHostsList("https://ok.example, nope", "h"); err == nil {
		t.Error("an origin without a host was accepted")
	}
}
