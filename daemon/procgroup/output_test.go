package procgroup_test

import (
	"io"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/procgroup"
)

// Output keeps the first Max bytes, whatever the writes' sizes, and an
// io.Copy into it (as exec does from a program's pipe) is bounded too.
func TestOutputKeepsTheHead(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
		over   bool
	}{
		{"under", []string{"ab", "cd"}, "abcd", false},
		{"exactly", []string{"abcde"}, "abcde", false},
		{"one write past", []string{"abcdefg"}, "abcde", true},
		{"later write past", []string{"abc", "defg", "h"}, "abcde", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := procgroup.Output{Max: 5}
			for _, w := range tc.writes {
				if n, err := o.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			if o.String() != tc.want || o.Overflowed() != tc.over {
				t.Fatalf("got %q over=%v, want %q over=%v", o.String(), o.Overflowed(), tc.want, tc.over)
			}
		})
	}
	o := procgroup.Output{Max: 1 << 10}
	if _, err := io.Copy(&o, strings.NewReader(strings.Repeat("x", 1<<20))); err != nil || len(o.Bytes()) != 1<<10 || !o.Overflowed() {
		t.Fatalf("io.Copy kept %d bytes, over=%v, err %v", len(o.Bytes()), o.Overflowed(), err)
	}
}

// A Tail Output keeps the last Max bytes, whatever the writes' sizes, in
// Max bytes of memory.
func TestOutputKeepsTheTail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
		over   bool
	}{
		{"under", []string{"ab", "cd"}, "abcd", false},
		{"exactly", []string{"abcde"}, "abcde", false},
		{"one write past", []string{"abcdefg"}, "cdefg", true},
		{"later write past", []string{"abc", "defg", "h"}, "defgh", true},
		{"around the ring", []string{"abcd", "ef", "gh", "ijk", "l"}, "hijkl", true},
		{"small writes", strings.Split("abcdefghijklm", ""), "ijklm", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := procgroup.Output{Max: 5, Tail: true}
			for _, w := range tc.writes {
				if n, err := o.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			if o.String() != tc.want || o.Overflowed() != tc.over {
				t.Fatalf("got %q over=%v, want %q over=%v", o.String(), o.Overflowed(), tc.want, tc.over)
			}
		})
	}
	o := procgroup.Output{Max: 1 << 10, Tail: true}
	src := strings.Repeat("0123456789", 1<<17)
	if _, err := io.Copy(&o, strings.NewReader(src)); err != nil || o.String() != src[len(src)-1<<10:] || !o.Overflowed() || cap(o.Bytes()) > 2<<10 {
		t.Fatalf("io.Copy kept %d bytes (cap %d), over=%v, err %v", len(o.Bytes()), cap(o.Bytes()), o.Overflowed(), err)
	}
}

// OnOverflow is called once, by the write that passes Max, in either mode.
func TestOutputOnOverflow(t *testing.T) {
	for _, tail := range []bool{false, true} {
		calls := 0
		o := procgroup.Output{Max: 4, Tail: tail, OnOverflow: func() { calls++ }}
		for i, w := range []string{"ab", "cd", "e", "fgh"} {
			_, _ = o.Write([]byte(w))
			if want := min(max(i-1, 0), 1); calls != want {
				t.Fatalf("tail=%v: %d calls after %d writes, want %d", tail, calls, i+1, want)
			}
		}
	}
}

// Ending keeps the end of stderr for a message: the last lines that fit,
// with secrets hidden before any cut.
func TestOutputEnding(t *testing.T) {
	redact := func(s string) string { return strings.ReplaceAll(s, "hunter2", "[REDACTED]") }
	for _, tc := range []struct {
		name    string
		max     int // of the Output
		printed string
		room    int
		want    string
	}{
		{"fits", 100, "  oops\n", 20, "oops"},
		{"whole lines", 100, "one\ntwo\nthree\nfour\n", 14, "…three\nfour"},
		{"one long line", 100, "abcdefghijklmnopqrstuvwxyz", 8, "…vwxyz"},
		{"utf-8 boundary", 100, "ééééé", 8, "…éé"},
		{"head lost: fragment dropped", 12, "first line\nsecond\nend\n", 40, "…second\nend"},
		{"head lost: one line", 6, "abcdefgh", 40, "…cdefgh"},
		// The ring's cut is not the program's: the rest of a character
		// it split is dropped, not shown as U+FFFD.
		{"head lost mid-character", 5, "éééé", 40, "…éé"},
		{"invalid bytes and NUL", 100, "a\xff\x00b", 20, "a\uFFFD\uFFFDb"},
		{"redacted before the cut", 100, "db at redis://:hunter2@h failed", 25, "…//:[REDACTED]@h failed"},
		// Cut first, the password's end would be left with no URL around
		// it for redaction to find.
		{"redacted before a cut in the URL", 100, "db at redis://:hunter2@h failed", 17, "…CTED]@h failed"},
		{"no room", 100, "abc\ndef", 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := procgroup.Output{Max: tc.max, Tail: true}
			_, _ = o.Write([]byte(tc.printed))
			got := o.Ending(tc.room, redact)
			if got != tc.want || len(got) > max(tc.room, 0) {
				t.Fatalf("Ending(%d) = %q, want %q", tc.room, got, tc.want)
			}
		})
	}
}
