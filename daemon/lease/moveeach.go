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
// one round trip per kind of outcome instead of one per step. A step whose
// Args have no array form (types other than integers and strings) falls
// back to Move. The arrays are typed by the Args' Go types, not by the
// columns they are written to: give each column a value of its own type
// (a string for an integer column, which Postgres converts for Move, fails
// here). SQLite runs Move per step: its statements are in-process and
// prepared once.
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
	if q.DB.Engine != sqldb.Postgres {
		return out, q.moveOneByOne(ctx, tx, steps, nil, out, now)
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
		ok, err := q.moveGroup(ctx, tx, steps, idx, out, k.from, k.to, k.set, now)
		if err != nil {
			return nil, err
		}
		if !ok {
			if err := q.moveOneByOne(ctx, tx, steps, idx, out, now); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// moveOneByOne runs Move for the steps idx (all of them when idx is nil),
// reporting a stale claim in out.
func (q *Queue) moveOneByOne(ctx context.Context, tx Execer, steps []Step, idx []int, out []error, now time.Time) error {
	one := func(i int) error {
		st := steps[i]
		err := q.Move(ctx, tx, st.Claim, st.To, now, st.Set, st.Args...)
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
// statement. It reports false, having written nothing, when their Args
// cannot travel as arrays.
func (q *Queue) moveGroup(ctx context.Context, tx Execer, steps []Step, idx []int, out []error, from, to, set string, now time.Time) (bool, error) {
	s := q.Spec
	nargs := sqldb.Placeholders(set, nil)
	ids, versions := make([]string, len(idx)), make([]int64, len(idx))
	byID := make(map[string]int, len(idx))
	for j, i := range idx {
		c := steps[i].Claim
		if len(steps[i].Args) != nargs {
			return false, nil
		}
		byID[c.ID] = i
		ids[j], versions[j] = c.ID, c.Version
	}
	// One array per ? of set, typed by its values; a position that is NULL
	// in every step is written as a NULL literal.
	cols := make([]string, nargs)
	var arrays []any
	var casts []string
	for k := 0; k < nargs; k++ {
		var ints []*int64
		var strs []*string
		for j, i := range idx {
			switch v := steps[i].Args[k].(type) {
			case nil:
			case int:
				n := int64(v)
				ints = grow(ints, len(idx), j, &n)
			case int64:
				ints = grow(ints, len(idx), j, &v)
			case string:
				strs = grow(strs, len(idx), j, &v)
			default:
				return false, nil
			}
		}
		switch {
		case ints != nil && strs != nil:
			return false, nil
		case ints != nil:
			arrays, casts = append(arrays, ints), append(casts, "bigint[]")
		case strs != nil:
			arrays, casts = append(arrays, strs), append(casts, "text[]")
		default:
			cols[k] = "NULL"
			continue
		}
		cols[k] = "v.mv_a" + strconv.Itoa(len(arrays))
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
				b.WriteString(cols[k])
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
