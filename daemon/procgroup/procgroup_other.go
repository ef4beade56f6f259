//go:build !linux

package procgroup

import "os/exec"

// Contain has no portable equivalent outside Linux; there cancelling the
// context kills the program itself.
func Contain(*exec.Cmd) {}

// Reap does nothing outside Linux.
func Reap(*exec.Cmd) {}
