package filehash

import "lukechampine.com/blake3/guts"

// segmentGroups is how many sixteen-chunk groups a segment holds.
const segmentGroups = SegmentSize / (16 * guts.ChunkSize)

// kernels names a set of segment kernels. Its chunks and parents methods
// compute sixteen chunks' and sixteen parents' chaining values per call,
// word-major (see chunks16 and parents16). They call the assembly directly,
// not through func values, so the scratch arrays below stay on the stack.
type kernels int

const (
	noKernels kernels = iota // guts hashes every segment
	avx2Kernels
	avx512Kernels
)

// segmentNode returns the node of the subtree over one whole segment
// starting at chunk counter, computed by k: every chunk's chaining value
// sixteen at a time, then each level of parents sixteen at a time, the last
// four levels one by one. The result is subtree's.
func segmentNode(k kernels, buf *[SegmentSize]byte, counter uint64) guts.Node {
	var cvs [segmentGroups][8][16]uint32 // group g: chunks 16g..16g+15, word-major
	var ctr [2][16]uint32
	for g := range segmentGroups {
		for j := range 16 {
			c := counter + uint64(16*g+j)
			ctr[0][j], ctr[1][j] = uint32(c), uint32(c>>32)
		}
		k.chunks(&cvs[g], (*[16 * guts.ChunkSize]byte)(buf[16*guts.ChunkSize*g:]), &ctr)
	}
	for n := segmentGroups; n > 1; n /= 2 {
		for g := 0; g < n/2; g++ {
			// in place: each call reads all of its input before it writes,
			// and group g is no later call's input
			k.parents(&cvs[g], (*[2][8][16]uint32)(cvs[2*g:]))
		}
	}
	var level [16][8]uint32
	for j := range 16 {
		for w := range 8 {
			level[j][w] = cvs[0][w][j]
		}
	}
	for n := 16; n > 2; n /= 2 {
		for j := 0; j < n/2; j++ {
			level[j] = guts.ChainingValue(guts.ParentNode(level[2*j], level[2*j+1], &guts.IV, 0))
		}
	}
	return guts.ParentNode(level[0], level[1], &guts.IV, 0)
}
