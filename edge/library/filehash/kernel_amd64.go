//go:build amd64 && !purego

package filehash

import "golang.org/x/sys/cpu"

//go:generate go run asmgen.go -out blake3_amd64.s

// The segment kernels this CPU runs: AVX-512 sixteen lanes at a time, AVX2
// eight (two calls fill the same sixteen-lane layout); without either,
// segments are hashed by lukechampine.com/blake3/guts alone.
var segmentKernels = pickKernels()

func pickKernels() kernels {
	sets := supportedKernels()
	if k, ok := sets["avx512"]; ok {
		return k
	}
	return sets["avx2"] // noKernels when there is none
}

// supportedKernels returns, by name, every kernel set this CPU can run.
func supportedKernels() map[string]kernels {
	sets := map[string]kernels{}
	if cpu.X86.HasAVX512F {
		sets["avx512"] = avx512Kernels
	}
	if cpu.X86.HasAVX2 {
		sets["avx2"] = avx2Kernels
	}
	return sets
}

func (k kernels) chunks(cvs *[8][16]uint32, buf *[16 * 1024]byte, ctr *[2][16]uint32) {
	if k == avx512Kernels {
		chunks16(cvs, buf, ctr)
		return
	}
	chunks8(&cvs[0][0], &buf[0], &ctr[0][0])
	chunks8(&cvs[0][8], &buf[8*1024], &ctr[0][8])
}

func (k kernels) parents(out *[8][16]uint32, in *[2][8][16]uint32) {
	if k == avx512Kernels {
		parents16(out, in)
		return
	}
	parents8(&out[0][0], &in[0][0][0])
	parents8(&out[0][8], &in[1][0][0])
}

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

// chunks8 is chunks16 for eight lanes: the chunks at buf, buf+1024, …,
// their counters' low words at ctr and high words at ctr+64 bytes, word w of
// their values written at cvs+64w bytes.
//
//go:noescape
func chunks8(cvs *uint32, buf *byte, ctr *uint32)

// parents8 is parents16 for eight parents of sixteen values: word w of
// values 0–7 at in+64w bytes and of values 8–15 at in+64w+32, word w of the
// parents written at out+64w.
//
//go:noescape
func parents8(out *uint32, in *uint32)
