package spool

import (
	"context"
	"testing"
)

// MustOpenExisting opens the spool at path as an operator's command does,
// on a connection of its own, closed at the test's end.
func MustOpenExisting(t *testing.T, path string) *Spool {
	t.Helper()
	s, err := OpenExisting(context.Background(), path, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// UnescapeHTML is unescapeHTML.
var UnescapeHTML = unescapeHTML
