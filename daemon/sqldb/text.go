package sqldb

import (
	"strings"
	"unicode/utf8"
)

// IsText reports whether v can be a text parameter on both engines: UTF-8
// without NUL. Postgres refuses either with an error; SQLite would store
// and compare them. Values from a request are checked with it before they
// reach a query, so bad input answers 400 or 404 on both engines alike.
func IsText(v string) bool {
	return utf8.ValidString(v) && !strings.ContainsRune(v, 0)
}
