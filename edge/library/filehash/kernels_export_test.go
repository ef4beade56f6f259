package filehash

import (
	"fmt"
	"sort"
)

// KernelSets names the segment kernels this CPU runs, plus "guts" (none).
func KernelSets() []string {
	names := []string{"guts"}
	for name := range supportedKernels() {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// UseKernels hashes segments with the named set (one of KernelSets) until
// the returned func puts the default back. Not safe while files are being
// hashed.
func UseKernels(name string) (restore func()) {
	k, ok := supportedKernels()[name]
	if !ok && name != "guts" {
		panic(fmt.Sprintf("filehash: no kernel set %q on this CPU", name))
	}
	was := segmentKernels
	segmentKernels = k
	return func() { segmentKernels = was }
}
