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

// TestRefreshKeepsTheSourceObject: a refreshed signed URL may renew only
// the signature parameters of the job's URL. One naming another version,
// file id or response override of the same path is ErrSourceMismatch and
// leaves credential_version as it was. Each refresh is compared with the
// URL sealed last, so a chain of accepted refreshes still pins the object
// the job was enqueued with.
func TestRefreshKeepsTheSourceObject(t *testing.T) {
	const (
		s3      = "https://s3.example.com/in/a.wav?versionId=111&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20260101T000000Z&X-Amz-Signature=aaa"
		dl      = "https://dl.example.com/download?file=AAA&sig=1"
		renamed = "https://s3.example.com/in/a.wav?response-content-disposition=attachment&X-Amz-Signature=aaa"
	)
	cases := []struct {
		name     string
		enqueued string
		refresh  []string // applied in order; all but the last are accepted
		ok       bool
	}{
		{"sigv4 renewed", s3, []string{"https://s3.example.com/in/a.wav?X-Amz-Signature=bbb&X-Amz-Date=20260102T000000Z&X-Amz-Algorithm=AWS4-HMAC-SHA256&versionId=111"}, true},
		{"sig renewed", dl, []string{"https://dl.example.com/download?sig=2&file=AAA"}, true},
		{"another versionId", s3, []string{"https://s3.example.com/in/a.wav?versionId=222&X-Amz-Signature=bbb"}, false},
		{"versionId dropped", s3, []string{"https://s3.example.com/in/a.wav?X-Amz-Signature=bbb"}, false},
		{"another file", dl, []string{"https://dl.example.com/download?file=BBB&sig=2"}, false},
		{"another response override", renamed, []string{"https://s3.example.com/in/a.wav?response-content-disposition=inline&X-Amz-Signature=bbb"}, false},
		{"another path", dl, []string{"https://dl.example.com/other?file=AAA&sig=2"}, false},
		{"another file after a renewal", dl, []string{"https://dl.example.com/download?file=AAA&sig=2", "https://dl.example.com/download?file=BBB&sig=3"}, false},
	}
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		s := inbox.New(db, testKeys(t), inbox.DefaultPolicy())
		req := addRequester(t, db)
		out := credentials.S3{AccessKeyID: "a", SecretAccessKey: "s"}
		for _, tc := range cases {
			j := newJob(req, false)
			j.Source = inbox.Source{URL: credentials.PlainURL(tc.enqueued)}
			j.Credentials = credentials.Storage{SourceURL: tc.enqueued, Output: out}
			if err := s.Enqueue(ctx, j); err != nil {
				t.Fatal(err)
			}
			want := 1
			for i, u := range tc.refresh {
				_, err := s.UpdateCredentials(ctx, j.ID, req, credentials.Storage{SourceURL: u, Output: out})
				last := i == len(tc.refresh)-1
				switch {
				case !last || tc.ok:
					if err != nil {
						t.Fatalf("%s: refresh %d refused: %v", tc.name, i, err)
					}
					want++
				case !errors.Is(err, inbox.ErrSourceMismatch):
					t.Fatalf("%s: refresh %d: %v, want ErrSourceMismatch", tc.name, i, err)
				}
			}
			if v, err := s.CredentialVersion(ctx, j.ID); err != nil || v != want {
				t.Fatalf("%s: credential_version %d (%v), want %d", tc.name, v, err, want)
			}
		}
	})
}
