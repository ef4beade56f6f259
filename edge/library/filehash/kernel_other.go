//go:build !amd64 || purego

package filehash

var segmentKernels = noKernels // guts hashes every segment

func supportedKernels() map[string]kernels { return nil }

func (kernels) chunks(*[8][16]uint32, *[16 * 1024]byte, *[2][16]uint32) {
	panic("filehash: no segment kernels on this platform")
}

func (kernels) parents(*[8][16]uint32, *[2][8][16]uint32) {
	panic("filehash: no segment kernels on this platform")
}
