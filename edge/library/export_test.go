package library

// SetRootWritable replaces the check New runs on each root (tests run as
// root, for whom no directory is unwritable by permission) until restore.
func SetRootWritable(fn func(root string) error) (restore func()) {
	old := rootWritable
	rootWritable = fn
	return func() { rootWritable = old }
}

// MachineHashAlgorithm is the algorithm a new catalog gets on this machine.
func MachineHashAlgorithm() string { return machineHashAlgorithm(thisMachine()) }
