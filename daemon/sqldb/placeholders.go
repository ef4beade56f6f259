package sqldb

import "strings"

// Placeholders counts the ? placeholders of a SQL text outside quoted
// literals and comments and, when emit is not nil, hands the text over in
// order as literal runs (k < 0, lit set) and placeholder positions (k = 0,
// 1, …). Rebind and the lease queue's batch statements both build on it, so
// the two can never disagree about which ? is a parameter. A comment is
// skipped whole: an apostrophe in one ("the job's id") would otherwise open
// a literal that hides every later placeholder.
func Placeholders(query string, emit func(k int, lit string)) int {
	n, start := 0, 0
	for i := 0; i < len(query); i++ {
		switch c := query[i]; {
		case c == '\'' || c == '"':
			if j := strings.IndexByte(query[i+1:], c); j >= 0 {
				i += j + 1
			} else {
				i = len(query)
			}
		case c == '-' && strings.HasPrefix(query[i:], "--"):
			if j := strings.IndexByte(query[i:], '\n'); j >= 0 {
				i += j
			} else {
				i = len(query)
			}
		case c == '/' && strings.HasPrefix(query[i:], "/*"):
			if j := strings.Index(query[i+2:], "*/"); j >= 0 {
				i += j + 3
			} else {
				i = len(query)
			}
		case c == '?':
			if emit != nil {
				emit(-1, query[start:i])
				emit(n, "")
			}
			start = i + 1
			n++
		}
	}
	if emit != nil {
		emit(-1, query[start:])
	}
	return n
}
