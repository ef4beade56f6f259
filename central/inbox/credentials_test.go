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
// fingerprint written last, so a chain of accepted refreshes still pins the
// object the job was enqueued with.
//
// The judge never opens the credentials: it is a store whose keyring
// cannot open them. A row from before source_fingerprint (NULL) is judged
// the old way, by opening the sealed URL, and the first accepted refresh
// writes its fingerprint, after which the keyring is no longer needed.
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
		{"renewed twice", dl, []string{"https://dl.example.com/download?file=AAA&sig=2", "https://dl.example.com/download?file=AAA&sig=3"}, true},
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
		// Same database, a keyring that opens nothing s sealed.
		blind := inbox.New(db, testKeys(t), inbox.DefaultPolicy())
		req := addRequester(t, db)
		out := credentials.S3{AccessKeyID: "a", SecretAccessKey: "s"}
		for _, legacy := range []bool{false, true} {
			for _, tc := range cases {
				j := newJob(req, false)
				j.Source = inbox.Source{URL: credentials.PlainURL(tc.enqueued)}
				j.Credentials = credentials.Storage{SourceURL: tc.enqueued, Output: out}
				if err := s.Enqueue(ctx, j); err != nil {
					t.Fatal(err)
				}
				judge := blind
				if legacy {
					forgetFingerprint(t, db, j.ID)
					// Only a keyring that opens the row can judge it now.
					if _, err := blind.UpdateCredentials(ctx, j.ID, req, credentials.Storage{SourceURL: tc.enqueued, Output: out}); !errors.Is(err, credentials.ErrDecrypt) {
						t.Fatalf("%s: pre-migration row judged without opening it: %v", tc.name, err)
					}
					judge = s
				}
				want := 1
				for i, u := range tc.refresh {
					_, err := judge.UpdateCredentials(ctx, j.ID, req, credentials.Storage{SourceURL: u, Output: out})
					last := i == len(tc.refresh)-1
					switch {
					case !last || tc.ok:
						if err != nil {
							t.Fatalf("%s (legacy %v): refresh %d refused: %v", tc.name, legacy, i, err)
						}
						want++
						// The fingerprint is written: what follows needs no keyring.
						judge = blind
					case !errors.Is(err, inbox.ErrSourceMismatch):
						t.Fatalf("%s (legacy %v): refresh %d: %v, want ErrSourceMismatch", tc.name, legacy, i, err)
					}
				}
				if v, err := s.CredentialVersion(ctx, j.ID); err != nil || v != want {
					t.Fatalf("%s (legacy %v): credential_version %d (%v), want %d", tc.name, legacy, v, err, want)
				}
			}
		}
	})
}

// TestBucketRefreshWithoutFingerprint: a bucket-source job from before
// source_fingerprint takes new credentials without anything being opened
// (its credentials name no object) and gets its fingerprint with them; a
// signed URL for it is still refused.
func TestBucketRefreshWithoutFingerprint(t *testing.T) {
	eachEngine(t, func(t *testing.T, db *sqldb.DB) {
		ctx := context.Background()
		s := inbox.New(db, testKeys(t), inbox.DefaultPolicy())
		blind := inbox.New(db, testKeys(t), inbox.DefaultPolicy())
		req := addRequester(t, db)
		id := enqueue(t, s, req, 1)[0]
		forgetFingerprint(t, db, id)
		out := credentials.S3{AccessKeyID: "a", SecretAccessKey: "s"}
		if _, err := blind.UpdateCredentials(ctx, id, req, credentials.Storage{SourceURL: "https://s3.example.com/in/a.wav?sig=1", Output: out}); !errors.Is(err, inbox.ErrSourceMismatch) {
			t.Fatalf("url for a bucket source: %v, want ErrSourceMismatch", err)
		}
		if v, err := blind.UpdateCredentials(ctx, id, req, credentials.Storage{Source: &out, Output: out}); err != nil || v != 2 {
			t.Fatalf("bucket refresh: %d %v", v, err)
		}
		if n := count(t, db, `SELECT COUNT(*) FROM inbox_jobs WHERE id = ? AND source_fingerprint IS NOT NULL`, id); n != 1 {
			t.Fatal("no fingerprint written with the refresh")
		}
	})
}

// forgetFingerprint makes id a row as enqueued before source_fingerprint.
func forgetFingerprint(t testing.TB, db *sqldb.DB, id string) {
	t.Helper()
	if _, err := db.Exec(db.Rebind(`UPDATE inbox_jobs SET source_fingerprint = NULL WHERE id = ?`), id); err != nil {
		t.Fatal(err)
	}
}
