//go:build !linux

package procgroup

import "os/exec"

// Contain has no portable equivalent outside Linux; there cancelling the
// context kills the program itself.
func Contain(*exec.Cmd) {}

// reap does nothing outside Linux, and so never sees the program exit.
func reap(*exec.Cmd) bool { return false }
