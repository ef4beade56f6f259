package credentials

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

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

// RewrapColumns moves every blob stored in cols that is not under k's
// active KEK to it, re-wrapping only the DEK (the payload ciphertext is
// unchanged). Rows are walked in primary-key order, a batch at a time, and
// each is written by a compare-and-set on its id, version and old kek_id,
// so a blob replaced meanwhile is left to its new writer. It returns the
// number of blobs rewrapped.
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
				return done, fmt.Errorf("rewrap %s %s: %w", cols.Table, r.id, err)
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
