package procgroup

import (
	"errors"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// Contain makes cmd, before it starts, the leader of a process group of
// its own that cancelling cmd's context kills whole, and has the kernel
// kill it when this process dies. Start cmd with Run, which keeps the
// death signal for the death of this process.
func Contain(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
}

// reap kills what is left of cmd's process group once the program itself
// has exited, so nothing it started in its group outlives the call. It waits for that
// exit without reaping the program (WNOWAIT): until Wait reaps it, its pid,
// which is the group's id, cannot be given to another process, so the kill
// never reaches anyone else. Call it after Start and before Wait. It
// reports whether it saw the program exit.
func reap(cmd *exec.Cmd) bool {
	if cmd.Process == nil {
		return false
	}
	pid := cmd.Process.Pid
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EINTR) {
			return false // not our child any more: nothing safe to kill
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return true
}
