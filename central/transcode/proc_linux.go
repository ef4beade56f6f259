package transcode

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill the child when the runner dies, even
// by SIGKILL, so an ffmpeg is never left encoding for a dead runner.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
