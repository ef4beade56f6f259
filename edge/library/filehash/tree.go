package filehash

import (
	"encoding/binary"

	"lukechampine.com/blake3/guts"
)

// The BLAKE3 tree over a file of n chunks is the left-complete binary tree
// whose subtrees are aligned runs of a power-of-two number of chunks. The
// functions here compute one such subtree from its bytes and merge subtrees
// into the root, exactly as the reference implementation's chaining-value
// stack does, so a file hashed in segments has the digest of one stream.

const simdBytes = guts.MaxSIMD * guts.ChunkSize

// subtree returns the node of the subtree over buf, which holds 2^k chunks
// starting at chunk counter (its last chunk may be partial when it is the
// end of the file). buf's capacity must reach a multiple of simdBytes past
// its start: the vector code reads whole 16-chunk blocks and ignores what
// lies past len(buf).
func subtree(buf []byte, counter uint64) guts.Node {
	if segmentKernels != noKernels && len(buf) == SegmentSize {
		return segmentNode(segmentKernels, (*[SegmentSize]byte)(buf), counter)
	}
	return subtreeGuts(buf, counter)
}

// subtreeGuts is subtree computed by guts alone.
func subtreeGuts(buf []byte, counter uint64) guts.Node {
	if len(buf) <= simdBytes {
		return guts.CompressBuffer((*[simdBytes]byte)(buf[:simdBytes]), len(buf), &guts.IV, counter, 0)
	}
	half := 1
	for half*2*guts.ChunkSize < len(buf) {
		half *= 2
	}
	// len(buf) is 2^k chunks (the last possibly partial), so the left half
	// holds 2^(k-1) whole chunks.
	l := subtreeGuts(buf[:half*guts.ChunkSize], counter)
	r := subtreeGuts(buf[half*guts.ChunkSize:], counter+uint64(half))
	return guts.ParentNode(guts.ChainingValue(l), guts.ChainingValue(r), &guts.IV, 0)
}

// piece is a subtree of 2^height chunks, in file order.
type piece struct {
	node   guts.Node
	height int
}

// root merges the subtrees covering a whole file, in order, into the
// 32-byte digest. Equal neighbours are merged only while more input
// follows them, and what is left is folded from the right, the last merge
// being the root; a single piece is itself the root.
func root(pieces []piece) [32]byte {
	var stack []piece
	for i, p := range pieces {
		stack = append(stack, p)
		for i < len(pieces)-1 && len(stack) >= 2 && stack[len(stack)-1].height == stack[len(stack)-2].height {
			l, r := stack[len(stack)-2], stack[len(stack)-1]
			stack = stack[:len(stack)-2]
			stack = append(stack, piece{guts.ParentNode(guts.ChainingValue(l.node), guts.ChainingValue(r.node), &guts.IV, 0), l.height + 1})
		}
	}
	n := stack[len(stack)-1].node
	for i := len(stack) - 2; i >= 0; i-- {
		n = guts.ParentNode(guts.ChainingValue(stack[i].node), guts.ChainingValue(n), &guts.IV, 0)
	}
	n.Flags |= guts.FlagRoot
	var out [32]byte
	for i, w := range guts.ChainingValue(n) {
		binary.LittleEndian.PutUint32(out[4*i:], w)
	}
	return out
}
