package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// TestUpdateCredentialsRechecksInTheWrite: UpdateCredentials reads the job
// and then writes; whatever committed in between is judged by the write
// itself. A job that became terminal meanwhile gets no new credentials
// (ErrFinished, 409 job_finished); a concurrent update that advanced the
// version first makes this one ErrCredentialConflict (409), not an
// internal error.
func TestUpdateCredentialsRechecksInTheWrite(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		s := inbox.New(db, testKeys(t), inbox.DefaultPolicy())
		req := addRequester(t, db)
		ids := enqueue(t, s, req, 2)
		creds := credentials.Storage{Output: credentials.S3{AccessKeyID: "a", SecretAccessKey: "new"}}
		cases := []struct {
			name      string
			id        string
			meanwhile string
			want      error
			version   int
		}{
			{"finished meanwhile", ids[0], `UPDATE inbox_jobs SET status = 'dead_letter', finished_at = 1 WHERE id = ?`, inbox.ErrFinished, 1},
			{"updated meanwhile", ids[1], `UPDATE inbox_jobs SET credential_version = credential_version + 1 WHERE id = ?`, inbox.ErrCredentialConflict, 2},
		}
		for _, tc := range cases {
			s.BetweenCredentialReadAndWrite(func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, db.Rebind(tc.meanwhile), tc.id)
				return err
			})
			_, err := s.UpdateCredentials(ctx, tc.id, req, creds)
			if !errors.Is(err, tc.want) {
				t.Fatalf("%s: %v, want %v", tc.name, err, tc.want)
			}
			// The transaction was rolled back: nothing of either write stays.
			if v, err := s.CredentialVersion(ctx, tc.id); err != nil || v != 1 {
				t.Fatalf("%s: credential_version %d (%v)", tc.name, v, err)
			}
		}
		s.BetweenCredentialReadAndWrite(nil)
		if v, err := s.UpdateCredentials(ctx, ids[1], req, creds); err != nil || v != 2 {
			t.Fatalf("plain update: %d %v", v, err)
		}
	})
}
