//go:build !amd64 || purego

package filehash

var segmentKernels kernels // none: guts hashes every segment

func supportedKernels() map[string]kernels { return nil }
