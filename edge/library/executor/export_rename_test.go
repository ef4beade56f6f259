package executor

import (
	"testing"

	"golang.org/x/sys/unix"
)

// WithoutRenameNoReplace makes every move of the test's deletes run as on
// a filesystem without RENAME_NOREPLACE (EINVAL), until the test ends.
func WithoutRenameNoReplace(t testing.TB) {
	saved := renameat2
	renameat2 = func(int, string, int, string, uint) error { return unix.EINVAL }
	t.Cleanup(func() { renameat2 = saved })
}
