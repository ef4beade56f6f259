package main

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/vesta-cx/euterpe/edge/console"
	"github.com/vesta-cx/euterpe/edge/library"
)

// The console is told a library with roots whose database is not open
// from one without roots, and why the open fails when that is known.
func TestPartsLibraryState(t *testing.T) {
	full := errors.New("disk full")
	notOpen := func() *library.Library { return nil }
	cases := []struct {
		name  string
		parts Parts
		want  console.LibraryState
	}{
		{"no roots", Parts{}, console.LibraryState{}},
		{"roots, reason not known", Parts{Library: notOpen}, console.LibraryState{Configured: true}},
		{"roots, reason known", Parts{Library: notOpen, LibraryErr: func() error { return full }},
			console.LibraryState{Configured: true, OpenErr: full}},
		{"no roots, an error is not shown", Parts{LibraryErr: func() error { return full }}, console.LibraryState{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, c.parts.libraryState())
		})
	}
}
