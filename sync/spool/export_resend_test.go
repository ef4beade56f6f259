package spool

import (
	"context"
	"fmt"
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

// ShortenOperatorBusy makes an operator's connection give up on a locked
// file after ms milliseconds, for the test's length.
func ShortenOperatorBusy(t *testing.T, ms int) {
	old := operatorBusy
	operatorBusy = fmt.Sprintf("busy_timeout(%d)", ms)
	t.Cleanup(func() { operatorBusy = old })
}
