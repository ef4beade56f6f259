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
