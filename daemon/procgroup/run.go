package procgroup

import "os/exec"

// Run starts cmd, contained by Contain beforehand, and waits for it, with
// what is left of its group killed as soon as the program exits (Reap).
func Run(cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	Reap(cmd)
	return cmd.Wait()
}
