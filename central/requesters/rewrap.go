package requesters

import (
	"context"
	"fmt"

	"github.com/vesta-cx/euterpe/central/credentials"
)

// secretColumns is where a requester's current and previous webhook
// secrets live; their AAD binds requester id and secret version.
func secretColumns(prefix string) credentials.Columns {
	return credentials.Columns{
		Table: "requesters", ID: "id", Prefix: prefix + "webhook_secret_", Version: prefix + "webhook_secret_version",
		AAD: func(id string, version int, _ []string) []byte { return credentials.WebhookSecretAAD(id, version) },
	}
}

// Rewrap moves every requester's webhook secrets (current and previous) to
// the active KEK. It returns the number of secrets rewrapped.
func (s *Store) Rewrap(ctx context.Context) (int, error) {
	n, err := credentials.RewrapSets(ctx, s.db, s.keys, s.now, secretColumns(""), secretColumns("previous_"))
	if err != nil {
		return n, fmt.Errorf("requesters: %w", err)
	}
	return n, nil
}
