package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// Step is one fenced move of MoveEach: Claim's row goes from Claim.Status
// to To, writing Set ("col = ?, col2 = NULL") with Args in the same
// statement, as Move does.
type Step struct {
	Claim *Claim
	To    string
	Set   string
	Args  []any
}

// MoveEach applies steps in tx with Move's checks and fencing, and returns
// per step nil or a *StaleError (a lost claim, which leaves the other steps
// alone). Any other error aborts: the transaction must be rolled back, and
// claims already moved in memory are the caller's to restore.
//
// On Postgres, steps with the same from status, To and Set share one
// statement, their ids, versions and Args travelling as array parameters:
// one round trip per kind of outcome instead of one per step. Each array
// is typed by the column its ? is written to (read once from the
// database's catalog), not by the values' Go types: a ? that is the whole
// value of an assignment ("col = ?", or "col = COALESCE(col, ?)") to an
// integer or text column takes integers (any Go integer type), or strings
// (or bytes) respectively, and NULL. On both engines any other value for
// such a ? (a string for an integer column, an integer for a text column,
// a time for a micros column) is refused with ErrArgType, naming the
// column, before anything is written. Steps whose Set has another ? (in an
// expression, or written to a column of another type) are written by Move,
// their values judged as Move's are. SQLite runs Move per step: its
// statements are in-process and prepared once.
//
// Steps naming one row twice (the same Claim, or two Claims with one ID)
// are refused with ErrRepeatedClaim before anything is written: grouped,
// such steps would run out of order and all be checked against the first
// status, so the engines would disagree on which moves happen.
func (q *Queue) MoveEach(ctx context.Context, tx Execer, steps []Step, now time.Time) ([]error, error) {
	if err := q.refuseRepeats(len(steps), func(i int) string { return steps[i].Claim.ID }, nil); err != nil {
		return nil, err
	}
	out := make([]error, len(steps))
	for _, st := range steps {
		if err := q.check(st.Claim.Status, st.To); err != nil {
			return nil, err
		}
	}
	vals, cols, err := q.fitArgs(ctx, tx, steps)
	if err != nil {
		return nil, err
	}
	if q.DB.Engine != sqldb.Postgres {
		return out, q.moveOneByOne(ctx, tx, steps, vals, nil, out, now)
	}
	type key struct{ from, to, set string }
	groups := map[key][]int{}
	var order []key
	for i, st := range steps {
		k := key{st.Claim.Status, st.To, st.Set}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	for _, k := range order {
		idx := groups[k]
		ok, err := q.moveGroup(ctx, tx, steps, vals, cols[k.set], idx, out, k.from, k.to, k.set, now)
		if err != nil {
			return nil, err
		}
		if !ok {
			if err := q.moveOneByOne(ctx, tx, steps, vals, idx, out, now); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// fitArgs checks every step's Args against the columns they are written
// to (argCols) and returns them as the arrays hold them (fit), with the
// columns of each Set. A step whose Args do not match its Set's ? count
// is left to Move (nil values).
func (q *Queue) fitArgs(ctx context.Context, tx Execer, steps []Step) ([][]any, map[string][]argCol, error) {
	vals := make([][]any, len(steps))
	cols := map[string][]argCol{}
	for i, st := range steps {
		c, ok := cols[st.Set]
		if !ok {
			var err error
			if c, err = q.argCols(ctx, tx, st.Set); err != nil {
				return nil, nil, err
			}
			cols[st.Set] = c
		}
		if len(st.Args) != len(c) {
			continue
		}
		vals[i] = make([]any, len(c))
		for k, v := range st.Args {
			f, err := fit(v, c[k])
			if err != nil {
				return nil, nil, fmt.Errorf("%s: step %d: %w", q.Spec.Table, i, err)
			}
			vals[i][k] = f
		}
	}
	return vals, cols, nil
}

// moveOneByOne runs Move for the steps idx (all of them when idx is nil),
// reporting a stale claim in out. A step's Args are written as fitArgs
// left them (vals), so both engines store what the arrays would.
func (q *Queue) moveOneByOne(ctx context.Context, tx Execer, steps []Step, vals [][]any, idx []int, out []error, now time.Time) error {
	one := func(i int) error {
		st := steps[i]
		args := st.Args
		if vals[i] != nil {
			args = vals[i]
		}
		err := q.Move(ctx, tx, st.Claim, st.To, now, st.Set, args...)
		if err != nil && !errors.Is(err, ErrStale) {
			return err
		}
		out[i] = err
		return nil
	}
	if idx == nil {
		for i := range steps {
			if err := one(i); err != nil {
				return err
			}
		}
		return nil
	}
	for _, i := range idx {
		if err := one(i); err != nil {
			return err
		}
	}
	return nil
}

// moveGroup writes the steps idx (same from, to and set) with one
// statement, their Args as vals holds them (fitArgs) in arrays of their
// columns' types (cols). It reports false, having written nothing, when a
// ? of set has no array form (kindOther) or a step's Args do not match set.
func (q *Queue) moveGroup(ctx context.Context, tx Execer, steps []Step, vals [][]any, cols []argCol, idx []int, out []error, from, to, set string, now time.Time) (bool, error) {
	s := q.Spec
	ids, versions := make([]string, len(idx)), make([]int64, len(idx))
	byID := make(map[string]int, len(idx))
	for j, i := range idx {
		c := steps[i].Claim
		if vals[i] == nil {
			return false, nil
		}
		byID[c.ID] = i
		ids[j], versions[j] = c.ID, c.Version
	}
	// One array per ? of set, of its column's kind (integers travel as
	// bigint, strings as text, and the assignment fits them to the column
	// as it fits Move's parameters: an over-long varchar is an error, not
	// cut); a position that is NULL in every step is written as a NULL
	// literal.
	exprs := make([]string, len(cols))
	var arrays []any
	var casts []string
	for k, col := range cols {
		if col.kind == kindOther {
			return false, nil
		}
		var ints []*int64
		var strs []*string
		for j, i := range idx {
			switch v := vals[i][k].(type) {
			case nil:
			case int64:
				ints = grow(ints, len(idx), j, &v)
			case string:
				strs = grow(strs, len(idx), j, &v)
			}
		}
		switch {
		case ints != nil:
			arrays, casts = append(arrays, ints), append(casts, "bigint[]")
		case strs != nil:
			arrays, casts = append(arrays, strs), append(casts, "text[]")
		default:
			exprs[k] = "NULL"
			continue
		}
		exprs[k] = "v.mv_a" + strconv.Itoa(len(arrays))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "UPDATE %s t SET %s = ?", s.Table, s.Status)
	args := []any{to}
	if s.UpdatedAt != "" {
		fmt.Fprintf(&b, ", %s = ?", s.UpdatedAt)
		args = append(args, sqldb.Micros(now))
	}
	if set != "" {
		b.WriteString(", ")
		sqldb.Placeholders(set, func(k int, lit string) {
			if k < 0 {
				b.WriteString(lit)
			} else {
				b.WriteString(exprs[k])
			}
		})
	}
	seq := "0"
	if s.Sequence != "" {
		fmt.Fprintf(&b, ", %s = t.%s + 1", s.Sequence, s.Sequence)
		seq = "t." + s.Sequence
	}
	b.WriteString(" FROM unnest(?::text[], ?::bigint[]")
	args = append(args, ids, versions)
	names := []string{"mv_id", "mv_ver"}
	for n, a := range arrays {
		fmt.Fprintf(&b, ", ?::%s", casts[n])
		args = append(args, a)
		names = append(names, "mv_a"+strconv.Itoa(n+1))
	}
	fmt.Fprintf(&b, ") AS v(%s) WHERE t.%s = v.mv_id AND t.%s = v.mv_ver AND t.%s = ? RETURNING t.%s, %s",
		strings.Join(names, ", "), s.ID, s.ClaimVersion, s.Status, s.ID, seq)
	args = append(args, from)
	rows, err := tx.QueryContext(ctx, q.DB.Rebind(b.String()), args...)
	if err != nil {
		return false, fmt.Errorf("%s: %s -> %s: %w", s.Table, from, to, err)
	}
	defer rows.Close()
	moved := make(map[int]int64, len(idx))
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return false, err
		}
		if i, ok := byID[id]; ok {
			moved[i] = n
		}
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("%s: %s -> %s: %w", s.Table, from, to, err)
	}
	for _, i := range idx {
		c := steps[i].Claim
		n, ok := moved[i]
		if !ok {
			out[i] = &StaleError{Table: s.Table, ID: c.ID, Version: c.Version}
			continue
		}
		c.Status, c.Seq = to, n
	}
	return true, nil
}

// refuseRepeats returns an ErrRepeatedClaim error when two of the n
// items (id(i) is the row item i names) name one row. byID, when not nil,
// is filled with each id's index.
func (q *Queue) refuseRepeats(n int, id func(i int) string, byID map[string]int) error {
	if byID == nil {
		byID = make(map[string]int, n)
	}
	for i := 0; i < n; i++ {
		k := id(i)
		if j, dup := byID[k]; dup {
			if len(k) > 64 {
				k = k[:64] + "…"
			}
			return fmt.Errorf("%s: %w: %s (items %d and %d)", q.Spec.Table, ErrRepeatedClaim, k, j, i)
		}
		byID[k] = i
	}
	return nil
}

// grow returns a (made on first use with room for n) with a[j] = v.
func grow[T any](a []*T, n, j int, v *T) []*T {
	if a == nil {
		a = make([]*T, n)
	}
	a[j] = v
	return a
}
