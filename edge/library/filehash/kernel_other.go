//go:build !amd64 || purego

package filehash

const haveKernels = false

func chunks16(*[8][16]uint32, *[16 * 1024]byte, *[2][16]uint32) { panic("filehash: no kernels") }

func parents16(*[8][16]uint32, *[2][8][16]uint32) { panic("filehash: no kernels") }
