package sqldb_test

import (
	"context"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

// TestRebindSkipsComments: a ? or a quote inside a SQL comment is neither a
// parameter nor the start of a literal; an apostrophe in a comment ("the
// job's id") used to hide every later placeholder from Rebind.
func TestRebindSkipsComments(t *testing.T) {
	ctx := context.Background()
	db := sqltest.Open(t, sqldb.Postgres)
	for _, tc := range []struct{ in, want string }{
		{"SELECT ? -- the job's id?\n, ?", "SELECT $1 -- the job's id?\n, $2"},
		{"SELECT ? /* why? it's \"quoted\" */, ?", "SELECT $1 /* why? it's \"quoted\" */, $2"},
		{"SELECT '--', ?, '/*', ?", "SELECT '--', $1, '/*', $2"},
		{"SELECT 1 - -?", "SELECT 1 - -$1"},
		{"SELECT ? -- to the end", "SELECT $1 -- to the end"},
	} {
		if got := db.Rebind(tc.in); got != tc.want {
			t.Errorf("Rebind(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if got := sqldb.Placeholders(tc.in, nil); got != sqldb.Placeholders(tc.want, nil)+countDollars(tc.want) {
			t.Errorf("Placeholders(%q) = %d", tc.in, got)
		}
	}
	var a, b int
	q := db.Rebind("SELECT ?::int -- the job's id\n, ?::int")
	if err := db.QueryRowContext(ctx, q, 1, 2).Scan(&a, &b); err != nil || a != 1 || b != 2 {
		t.Fatalf("%d %d %v", a, b, err)
	}
}

func countDollars(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '$' {
			n++
		}
	}
	return n
}
