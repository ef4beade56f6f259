package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/vesta-cx/euterpe/central/serve"
	"github.com/vesta-cx/euterpe/daemon"
)

// What only the operator can end exits 2 (systemd does not restart it);
// anything else exits 1 and is restarted.
func TestRefusalExitsTwo(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"setting", fmt.Errorf("role runner: %w", &daemon.SettingError{Setting: "EUTERPE_X", Reason: "bad"}), true},
		{"keyring", serve.ErrKeyringRequired, true},
		{"former state directory", fmt.Errorf("state directory (EUTERPE_STATE_DIR): %w /var/lib/euterpe", serve.ErrFormerStateDir), true},
		{"database down", errors.New("database (EUTERPE_DATABASE_URL): connection refused"), false},
	} {
		if got := refusal(tt.err); got != tt.want {
			t.Errorf("%s: refusal = %v, want %v", tt.name, got, tt.want)
		}
	}
}
