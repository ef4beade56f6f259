//go:build !amd64 || purego

package filehash

var segmentKernels kernels

const haveKernels = false

func supportedKernels() map[string]kernels { return nil }
