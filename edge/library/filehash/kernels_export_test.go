package filehash

import "sort"

// KernelSets names the segment kernels this CPU runs, plus "guts" (none).
func KernelSets() []string {
	names := []string{"guts"}
	for name := range supportedKernels() {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// UseKernels hashes segments with the named set until the returned func
// puts the default back. Not safe while files are being hashed.
func UseKernels(name string) (restore func()) {
	was := segmentKernels
	segmentKernels = supportedKernels()[name] // "guts": the zero kernels
	return func() { segmentKernels = was }
}
