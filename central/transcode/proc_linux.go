package transcode

import (
	"errors"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// contain puts the program in a process group of its own and makes the
// context's cancellation kill that whole group: a site wrapper around
// ffmpeg (nice, ionice, a library path set in a script) runs the encoder
// as its child, which killing the wrapper alone would leave encoding for a
// job given up, holding the output pipe open. Pdeathsig makes the kernel
// kill the direct child when the runner dies, even by SIGKILL.
func contain(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Cancel = func() error {
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
}

// reap kills what is left of the program's process group once the
// program itself has exited, so nothing it started outlives the call. It
// waits for that exit without reaping the program (WNOWAIT): until Wait
// reaps it, its pid, which is the group's id, cannot be given to another
// process, so the kill never reaches anyone else. Call it before Wait.
func reap(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	pid := cmd.Process.Pid
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EINTR) {
			return // not our child any more: nothing safe to kill
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}
