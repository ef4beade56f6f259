package lease

import (
	"context"
	"database/sql/driver"
	"fmt"
	"math"
	"reflect"
	"strings"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
)

// colKind is what a column holds, as far as MoveEach's arrays go.
type colKind uint8

const (
	// kindOther has no array form: the steps are written by Move, their
	// values judged by the driver and the database alone.
	kindOther colKind = iota
	kindInt
	kindText
)

// argCol is the column one ? of a Step's Set is written to.
type argCol struct {
	name, typ string // typ as the database declares it
	kind      colKind
}

// argCols returns, per ? of set, the column it is written to (kindOther
// for a ? that is not an assignment's whole value, "col = ?", or the
// fallback of "col = COALESCE(col, ?)"). The table's column types are read
// once, on tx: a connection of its own could be the one tx holds.
func (q *Queue) argCols(ctx context.Context, tx Execer, set string) ([]argCol, error) {
	q.colMu.Lock()
	defer q.colMu.Unlock()
	if cols, ok := q.setCols[set]; ok {
		return cols, nil
	}
	if q.colTypes == nil {
		types, err := q.readColumnTypes(ctx, tx)
		if err != nil {
			return nil, fmt.Errorf("%s: column types: %w", q.Spec.Table, err)
		}
		q.colTypes, q.setCols = types, map[string][]argCol{}
	}
	names := placeholderColumns(set)
	cols := make([]argCol, len(names))
	for k, n := range names {
		if t, ok := q.colTypes[strings.ToLower(n)]; ok && n != "" {
			cols[k] = argCol{name: n, typ: t, kind: kindOf(q.DB.Engine, t)}
		}
	}
	q.setCols[set] = cols
	return cols, nil
}

// readColumnTypes returns the declared type of each column of the table,
// by lower-case name.
func (q *Queue) readColumnTypes(ctx context.Context, tx Execer) (map[string]string, error) {
	query, args := sqldb.SQLiteTableInfo("name, type", q.Spec.Table)
	if q.DB.Engine == sqldb.Postgres {
		// regclass reads a qualified name as the statements do.
		query, args = `SELECT a.attname, format_type(a.atttypid, NULL) FROM pg_attribute a
			WHERE a.attrelid = CAST(CAST(? AS text) AS regclass) AND a.attnum > 0 AND NOT a.attisdropped`, []any{q.Spec.Table}
	}
	rows, err := tx.QueryContext(ctx, q.DB.Rebind(query), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	types := map[string]string{}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return nil, err
		}
		types[strings.ToLower(name)] = typ
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(types) == 0 {
		return nil, fmt.Errorf("no columns found")
	}
	return types, nil
}

// kindOf maps a declared column type to its kind: Postgres' integer and
// character types by name, SQLite's by its rules of type affinity.
func kindOf(e sqldb.Engine, typ string) colKind {
	t := strings.ToLower(typ)
	if e == sqldb.Postgres {
		switch t {
		case "bigint", "integer", "smallint":
			return kindInt
		case "text", "character varying", "character":
			return kindText
		}
		return kindOther
	}
	switch {
	case strings.Contains(t, "int"):
		return kindInt
	case strings.Contains(t, "char"), strings.Contains(t, "clob"), strings.Contains(t, "text"):
		return kindText
	}
	return kindOther
}

// placeholderColumns returns, per ? of set, the column of the assignment
// whose whole value it is ("col = ?") or whose COALESCE fallback it is
// ("col = COALESCE(col, ?)"), and "" for any other ?. A set it cannot
// split (its ? count differs from sqldb.Placeholders') names no column.
func placeholderColumns(set string) []string {
	var out []string
	for _, item := range splitTop(set) {
		col, expr, ok := strings.Cut(item, "=")
		n := sqldb.Placeholders(expr, nil)
		if !ok || n == 0 {
			continue
		}
		col = strings.TrimSpace(col)
		if i := strings.LastIndexByte(col, '.'); i >= 0 {
			col = col[i+1:]
		}
		e := strings.ToLower(strings.Join(strings.Fields(expr), ""))
		if n != 1 || (e != "?" && e != "coalesce("+strings.ToLower(col)+",?)") {
			col = ""
		}
		for ; n > 0; n-- {
			out = append(out, col)
		}
	}
	if len(out) != sqldb.Placeholders(set, nil) {
		return make([]string, sqldb.Placeholders(set, nil))
	}
	return out
}

// splitTop splits set at the commas outside parentheses and quotes.
func splitTop(set string) []string {
	var items []string
	depth, start := 0, 0
	for i := 0; i < len(set); i++ {
		switch c := set[i]; c {
		case '\'', '"':
			if j := strings.IndexByte(set[i+1:], c); j >= 0 {
				i += j + 1
			} else {
				i = len(set)
			}
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				items = append(items, set[start:i])
				start = i + 1
			}
		}
	}
	return append(items, set[start:])
}

// fit converts v to what col's array holds: an int64 for an integer
// column, a string for a text column, nil for NULL (and for nil bytes,
// which the drivers write as NULL). A driver.Valuer is judged by its
// Value and a pointer by what it points to, as database/sql does. Any
// other value is refused with ErrArgType: a string is not parsed into an
// integer, nor an integer formatted as text, nor a time turned into
// micros, on either engine.
func fit(v any, col argCol) (any, error) {
	if dv, ok := v.(driver.Valuer); ok {
		if rv := reflect.ValueOf(v); rv.Kind() != reflect.Pointer || !rv.IsNil() {
			val, err := dv.Value()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", col.name, err)
			}
			v = val
		}
	}
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return nil, nil
		}
		rv = rv.Elem()
	}
	if !rv.IsValid() {
		return nil, nil
	}
	switch col.kind {
	case kindInt:
		switch rv.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			return rv.Int(), nil
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			if u := rv.Uint(); u <= math.MaxInt64 {
				return int64(u), nil
			}
		}
	case kindText:
		switch {
		case rv.Kind() == reflect.String:
			return rv.String(), nil
		case rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Uint8:
			if rv.IsNil() {
				return nil, nil // the drivers write nil bytes as NULL
			}
			return string(rv.Bytes()), nil
		}
	default:
		return v, nil
	}
	return nil, fmt.Errorf("%s: %w: %T for %s", col.name, ErrArgType, v, col.typ)
}
