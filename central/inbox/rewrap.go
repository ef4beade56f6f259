package inbox

import (
	"context"
	"fmt"

	"github.com/vesta-cx/euterpe/central/credentials"
)

// jobCredentialColumns is where a job's sealed storage credentials live;
// their AAD binds job id, requester id and credential_version.
var jobCredentialColumns = credentials.Columns{
	Table: "inbox_jobs", ID: "id", Prefix: "storage_creds_", Version: "credential_version",
	Extra: []string{"requester_id"},
	AAD: func(id string, version int, extra []string) []byte {
		return credentials.JobAAD(id, extra[0], version)
	},
}

// Rewrap moves every job's credential blob to the keyring's active KEK by
// re-wrapping its DEK (the payload is untouched). Rows are updated only if
// their blob did not change meanwhile. It returns the number rewrapped.
func (s *Store) Rewrap(ctx context.Context) (int, error) {
	n, err := credentials.RewrapColumns(ctx, s.db, s.keys, jobCredentialColumns, s.now)
	if err != nil {
		return n, fmt.Errorf("inbox: %w", err)
	}
	return n, nil
}
