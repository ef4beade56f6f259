package daemon

import (
	"fmt"

	"golang.org/x/sys/unix"
)

func setDumpable(on bool) error {
	var v uintptr // SUID_DUMP_DISABLE
	if on {
		v = 1 // SUID_DUMP_USER
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, v, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, %d): %w", v, err)
	}
	return nil
}
