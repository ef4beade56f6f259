//go:build !linux

package transcode

import "os/exec"

// dieWithParent has no portable equivalent outside Linux; there the
// context kill on a lost lease or shutdown is what stops ffmpeg.
func dieWithParent(*exec.Cmd) {}
