package procgroup

import (
	"os"
	"os/exec"
	"runtime"
	"sync"
)

// Run starts cmd, contained by Contain beforehand, and waits for it, with
// what is left of its group killed as soon as the program exits.
//
// The kernel sends the death signal (Contain) when the thread that started
// the program ends, not when this process does, and Go ends any thread a
// goroutine leaves locked on return. Run keeps the starting thread locked
// until the program is reaped, so no other goroutine can run on it, end it
// and have a healthy program killed.
func Run(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// exec calls Cancel from its own goroutine when the context ends, and
	// a context ending as the program exits can have that call come after
	// Wait reaped the program, when its pid, the group's id, may already
	// belong to someone else. Once the program has exited, Cancel kills
	// no one.
	var mu sync.Mutex
	exited := false
	if cancel := cmd.Cancel; cancel != nil {
		cmd.Cancel = func() error {
			mu.Lock()
			defer mu.Unlock()
			if exited {
				return os.ErrProcessDone
			}
			return cancel()
		}
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	if reap(cmd) {
		mu.Lock()
		exited = true
		mu.Unlock()
	}
	return cmd.Wait()
}
