//go:build !linux

package transcode

import "os/exec"

// contain has no portable equivalent outside Linux; there the context
// kill on a lost lease or shutdown stops the program itself.
func contain(*exec.Cmd) {}

func reap(*exec.Cmd) {}
