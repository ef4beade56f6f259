package credentials

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Columns names where one kind of sealed blob is stored: the four columns
// Prefix+"encrypted", Prefix+"dek_wrapped", Prefix+"kek_id" and
// Prefix+"encryption_version" of Table, keyed by ID, with Version the
// column bound into the blob's AAD (credential or secret version).
type Columns struct {
	Table, ID, Prefix, Version string
	// Extra lists further text columns the AAD needs (e.g. requester_id).
	Extra []string
	// AAD builds a row's associated data from its id, version and Extra
	// values (in Extra's order).
	AAD func(id string, version int, extra []string) []byte
}

// rewrapBatch is how many rows one read of RewrapColumns takes.
const rewrapBatch = 200

// ErrRewrapIncomplete is matched (errors.Is) by the error of a rewrap that
// left blobs under their old KEK because they did not open.
var ErrRewrapIncomplete = errors.New("credentials: blobs left under their old KEK")

// maxRewrapFailureIDs bounds the row ids a RewrapError keeps; Count goes on.
const maxRewrapFailureIDs = 1000

// RewrapError names the rows of one set of columns whose blob could not be
// opened to rewrap (its KEK gone from the keyring, a corrupt blob). It holds
// row ids and the first cause, never key material.
type RewrapError struct {
	Table  string   // e.g. "inbox_jobs"
	Prefix string   // the columns' prefix, e.g. "previous_webhook_secret_"
	IDs    []string // failed row ids in key order, the first maxRewrapFailureIDs
	Count  int      // every failed row
	Cause  error    // why the first one failed
}

func (e *RewrapError) Error() string {
	const shown = 5
	ids := strings.Join(e.IDs[:min(len(e.IDs), shown)], ", ")
	if e.Count > shown {
		ids += fmt.Sprintf(" and %d more", e.Count-shown)
	}
	return daemon.CapMessage(fmt.Sprintf("rewrap %s %s*: %d blob(s) not rewrapped (rows %s): %v",
		e.Table, e.Prefix, e.Count, ids, e.Cause))
}

// Is makes every RewrapError match ErrRewrapIncomplete.
func (e *RewrapError) Is(target error) bool { return target == ErrRewrapIncomplete }

// Unwrap gives the first cause (ErrUnknownKEK, ErrDecrypt).
func (e *RewrapError) Unwrap() error { return e.Cause }

// RewrapSets rewraps each set of columns in turn (a current and a previous
// secret, say). A set with blobs that did not open does not stop the ones
// after it: their *RewrapErrors are joined (errors.Join), and any other
// error ends the walk.
func RewrapSets(ctx context.Context, db *sqldb.DB, k *Keyring, now func() time.Time, sets ...Columns) (int, error) {
	total := 0
	var left []error
	for _, cols := range sets {
		n, err := RewrapColumns(ctx, db, k, cols, now)
		total += n
		if err != nil {
			if !errors.Is(err, ErrRewrapIncomplete) {
				return total, errors.Join(append(left, err)...)
			}
			left = append(left, err)
		}
	}
	return total, errors.Join(left...)
}

// RewrapColumns moves every blob stored in cols that is not under k's
// active KEK to it, re-wrapping only the DEK (the payload ciphertext is
// unchanged). Rows are walked in primary-key order, a batch at a time, and
// each is written by a compare-and-set on its id, version and old kek_id,
// so a blob replaced meanwhile is left to its new writer. A blob that does
// not open is skipped, not the end of the walk: the rows after it still
// move, and the error, a *RewrapError, names every row left behind once the
// walk is done. It returns the number of blobs rewrapped.
func RewrapColumns(ctx context.Context, db *sqldb.DB, k *Keyring, cols Columns, now func() time.Time) (int, error) {
	p := cols.Prefix
	sel := db.Rebind(fmt.Sprintf(`SELECT %s, %s, %sencrypted, %sdek_wrapped, %skek_id, %sencryption_version%s FROM %s
		WHERE %skek_id IS NOT NULL AND %skek_id <> ? AND %s > ? ORDER BY %s LIMIT ?`,
		cols.ID, cols.Version, p, p, p, p, prefixed(", ", cols.Extra), cols.Table, p, p, cols.ID, cols.ID))
	upd := db.Rebind(fmt.Sprintf(`UPDATE %s SET %sdek_wrapped = ?, %skek_id = ?, %sencryption_version = ?, updated_at = ?
		WHERE %s = ? AND %s = ? AND %skek_id = ?`, cols.Table, p, p, p, cols.ID, cols.Version, p))
	type row struct {
		id      string
		version int
		sealed  Sealed
		extra   []string
	}
	done, after := 0, ""
	var failed *RewrapError
	for {
		var rows []row
		q, err := db.QueryContext(ctx, sel, k.ActiveID(), after, rewrapBatch)
		if err != nil {
			return done, fmt.Errorf("rewrap %s: %w", cols.Table, err)
		}
		for q.Next() {
			r := row{extra: make([]string, len(cols.Extra))}
			dest := []any{&r.id, &r.version, &r.sealed.Ciphertext, &r.sealed.WrappedDEK, &r.sealed.KEKID, &r.sealed.Version}
			for i := range r.extra {
				dest = append(dest, &r.extra[i])
			}
			if err := q.Scan(dest...); err != nil {
				q.Close()
				return done, fmt.Errorf("rewrap %s: %w", cols.Table, err)
			}
			rows = append(rows, r)
		}
		q.Close()
		if err := q.Err(); err != nil {
			return done, fmt.Errorf("rewrap %s: %w", cols.Table, err)
		}
		for _, r := range rows {
			out, changed, err := k.Rewrap(r.sealed, cols.AAD(r.id, r.version, r.extra))
			if err != nil {
				if failed == nil {
					failed = &RewrapError{Table: cols.Table, Prefix: cols.Prefix, Cause: err}
				}
				failed.Count++
				if len(failed.IDs) < maxRewrapFailureIDs {
					failed.IDs = append(failed.IDs, r.id)
				}
				continue
			}
			if !changed {
				continue
			}
			var n int64
			// Read before the transaction: a lease clock not yet measured
			// would wait for a connection the transaction holds.
			at := sqldb.Micros(now())
			err = db.Tx(ctx, func(tx *sql.Tx) error {
				res, err := tx.ExecContext(ctx, upd, out.WrappedDEK, out.KEKID, out.Version, at, r.id, r.version, r.sealed.KEKID)
				if err != nil {
					return err
				}
				n, err = res.RowsAffected()
				return err
			})
			if err != nil {
				return done, fmt.Errorf("rewrap %s %s: %w", cols.Table, r.id, err)
			}
			done += int(n)
		}
		if len(rows) < rewrapBatch {
			if failed != nil {
				return done, failed
			}
			return done, nil
		}
		after = rows[len(rows)-1].id
	}
}

func prefixed(sep string, cols []string) string {
	if len(cols) == 0 {
		return ""
	}
	return sep + strings.Join(cols, sep)
}
