//go:build amd64 && !purego

package filehash

import "golang.org/x/sys/cpu"

//go:generate go run asmgen.go -out blake3_amd64.s

// haveKernels reports whether this CPU runs the AVX-512 kernels; elsewhere
// segments are hashed by lukechampine.com/blake3/guts alone.
var haveKernels = cpu.X86.HasAVX512F

// chunks16 writes the chaining values of the sixteen whole chunks in buf
// (chunk j with counter ctr[0][j] | ctr[1][j]<<32) word-major: cvs[w][j] is
// word w of chunk j's value.
//
//go:noescape
func chunks16(cvs *[8][16]uint32, buf *[16 * 1024]byte, ctr *[2][16]uint32)

// parents16 writes, word-major, the chaining values of the sixteen parents
// of the thirty-two word-major values in in (parent j of values 2j, 2j+1).
//
//go:noescape
func parents16(out *[8][16]uint32, in *[2][8][16]uint32)
