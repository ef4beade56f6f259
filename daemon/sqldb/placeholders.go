package sqldb

// Placeholders counts the ? placeholders of a SQL text outside quoted
// literals and, when emit is not nil, hands the text over in order as
// literal runs (k < 0, lit set) and placeholder positions (k = 0, 1, …).
// Rebind and the lease queue's batch statements both build on it, so the
// two can never disagree about which ? is a parameter.
func Placeholders(query string, emit func(k int, lit string)) int {
	n, start := 0, 0
	var quote byte
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
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
