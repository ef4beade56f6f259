//go:build ignore

// asmgen writes blake3_amd64.s: the two AVX-512 kernels of the segment
// hasher (chunks16 and parents16). Run with `go generate` in this package.
//
// Each kernel compresses sixteen BLAKE3 inputs at once, one per 32-bit lane
// of the zmm registers. The four G functions of a half-round are emitted
// step by step side by side rather than one after another, so every step
// offers the core four independent instructions; message words are loaded
// as whole 64-byte rows and transposed with shuffles (no gathers).
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

var schedule = [7][16]int{
	{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
	{2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8},
	{3, 4, 10, 12, 13, 2, 7, 14, 6, 5, 9, 0, 11, 15, 8, 1},
	{10, 7, 12, 9, 14, 3, 13, 15, 4, 0, 11, 2, 5, 8, 1, 6},
	{12, 13, 9, 11, 15, 10, 14, 8, 7, 2, 5, 3, 0, 1, 6, 4},
	{9, 14, 11, 5, 8, 12, 15, 1, 13, 3, 0, 10, 2, 6, 4, 7},
	{11, 15, 5, 0, 1, 9, 8, 6, 14, 10, 2, 12, 3, 4, 7, 13},
}

var iv = [8]uint32{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}

type gen struct{ b strings.Builder }

func (g *gen) f(format string, args ...any) { fmt.Fprintf(&g.b, format+"\n", args...) }

func z(n int) string { return fmt.Sprintf("Z%d", n) }

// regs assigns registers to the transposition's values: Z0–Z7 hold the
// chaining value throughout, the other 24 are handed out and returned.
type regs struct{ free []int }

func newRegs() *regs {
	r := &regs{}
	for i := 8; i < 32; i++ {
		r.free = append(r.free, i)
	}
	return r
}

func (r *regs) get() int {
	n := r.free[0]
	r.free = r.free[1:]
	return n
}

func (r *regs) put(n int) { r.free = append(r.free, n) }

// pair emits lo = op_lo(a, b) into a fresh register and hi = op_hi(a, b)
// into a's register, releasing b's.
func (g *gen) pair(r *regs, lo, hi string, a, b int) (int, int) {
	t := r.get()
	g.f("\t%s %s, %s, %s", lo, z(b), z(a), z(t))
	g.f("\t%s %s, %s, %s", hi, z(b), z(a), z(a))
	r.put(b)
	return t, a
}

// shuf is pair for VSHUFI32X4 with two immediates.
func (g *gen) shuf(r *regs, immLo, immHi int, a, b int) (int, int) {
	t := r.get()
	g.f("\tVSHUFI32X4 $0x%02x, %s, %s, %s", immLo, z(b), z(a), z(t))
	g.f("\tVSHUFI32X4 $0x%02x, %s, %s, %s", immHi, z(b), z(a), z(a))
	r.put(b)
	return t, a
}

// transpose turns rows[j] (lane j's sixteen message words) into msg[i]
// (word i of every lane) and returns the registers holding msg.
func (g *gen) transpose(r *regs, rows [16]int) [16]int {
	var l1, h1 [8]int
	for p := range 8 {
		l1[p], h1[p] = g.pair(r, "VPUNPCKLDQ", "VPUNPCKHDQ", rows[2*p], rows[2*p+1])
	}
	var u [4][4]int // u[group][c]
	for grp := range 4 {
		u[grp][0], u[grp][1] = g.pair(r, "VPUNPCKLQDQ", "VPUNPCKHQDQ", l1[2*grp], l1[2*grp+1])
		u[grp][2], u[grp][3] = g.pair(r, "VPUNPCKLQDQ", "VPUNPCKHQDQ", h1[2*grp], h1[2*grp+1])
	}
	var msg [16]int
	for c := range 4 {
		lo01, hi01 := g.shuf(r, 0x44, 0xee, u[0][c], u[1][c])
		lo23, hi23 := g.shuf(r, 0x44, 0xee, u[2][c], u[3][c])
		msg[c], msg[4+c] = g.shuf(r, 0x88, 0xdd, lo01, lo23)
		msg[8+c], msg[12+c] = g.shuf(r, 0x88, 0xdd, hi01, hi23)
	}
	return msg
}

// compress runs the seven rounds over v (v[0:8] the chaining value in
// Z0–Z7, v[8:16] already set) and msg, leaving the new chaining value in
// Z0–Z7.
func (g *gen) compress(v [16]int, msg [16]int) {
	for round := range 7 {
		s := schedule[round]
		g.half(v, [4][4]int{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}, msg, s[0:8])
		g.half(v, [4][4]int{{0, 5, 10, 15}, {1, 6, 11, 12}, {2, 7, 8, 13}, {3, 4, 9, 14}}, msg, s[8:16])
	}
	for i := range 8 {
		g.f("\tVPXORD %s, %s, %s", z(v[i+8]), z(v[i]), z(v[i]))
	}
}

// half emits four G functions, one step of each at a time.
func (g *gen) half(v [16]int, cols [4][4]int, msg [16]int, s []int) {
	each := func(fn func(a, b, c, d, k int)) {
		for k, col := range cols {
			fn(v[col[0]], v[col[1]], v[col[2]], v[col[3]], k)
		}
	}
	mix := func(word int, rot1, rot2 int) {
		each(func(a, b, _, _, _ int) { g.f("\tVPADDD %s, %s, %s", z(b), z(a), z(a)) })
		each(func(a, _, _, _, k int) { g.f("\tVPADDD %s, %s, %s", z(msg[s[2*k+word]]), z(a), z(a)) })
		each(func(a, _, _, d, _ int) { g.f("\tVPXORD %s, %s, %s", z(a), z(d), z(d)) })
		each(func(_, _, _, d, _ int) { g.f("\tVPRORD $%d, %s, %s", rot1, z(d), z(d)) })
		each(func(_, _, c, d, _ int) { g.f("\tVPADDD %s, %s, %s", z(d), z(c), z(c)) })
		each(func(_, b, c, _, _ int) { g.f("\tVPXORD %s, %s, %s", z(c), z(b), z(b)) })
		each(func(_, b, _, _, _ int) { g.f("\tVPRORD $%d, %s, %s", rot2, z(b), z(b)) })
	}
	mix(0, 16, 12)
	mix(1, 8, 7)
}

// state sets v[8:16]: the IV's first half, the counters (from the lo/hi
// vectors at ctr, or zero), the block length and the flags.
func (g *gen) state(r *regs, ctr string, flags string) [16]int {
	var v [16]int
	for i := range 8 {
		v[i] = i
	}
	for i := 8; i < 16; i++ {
		v[i] = r.get()
	}
	for i := range 4 {
		g.f("\tVPBROADCASTD iv<>+%d(SB), %s", 4*i, z(v[8+i]))
	}
	if ctr == "" {
		g.f("\tVPXORD %s, %s, %s", z(v[12]), z(v[12]), z(v[12]))
		g.f("\tVPXORD %s, %s, %s", z(v[13]), z(v[13]), z(v[13]))
	} else {
		g.f("\tVMOVDQU32 (%s), %s", ctr, z(v[12]))
		g.f("\tVMOVDQU32 64(%s), %s", ctr, z(v[13]))
	}
	g.f("\tVPBROADCASTD blocklen<>(SB), %s", z(v[14]))
	g.f("\tVPBROADCASTD %s, %s", flags, z(v[15]))
	return v
}

func (g *gen) loadIV() {
	for i := range 8 {
		g.f("\tVPBROADCASTD iv<>+%d(SB), %s", 4*i, z(i))
	}
}

func (g *gen) storeCV(out string) {
	for i := range 8 {
		g.f("\tVMOVDQU32 %s, %d(%s)", z(i), 64*i, out)
	}
}

func main() {
	out := flag.String("out", "blake3_amd64.s", "output file")
	flag.Parse()
	g := &gen{}
	g.f("// Code generated by asmgen.go; DO NOT EDIT.")
	g.f("")
	g.f("//go:build amd64 && !purego")
	g.f("")
	g.f("#include \"textflag.h\"")
	g.f("")
	for i, w := range iv {
		g.f("DATA iv<>+%d(SB)/4, $0x%08x", 4*i, w)
	}
	g.f("GLOBL iv<>(SB), RODATA|NOPTR, $32")
	g.f("DATA blocklen<>+0(SB)/4, $64")
	g.f("GLOBL blocklen<>(SB), RODATA|NOPTR, $4")
	// chunk flags by block index: CHUNK_START on the first, CHUNK_END on the last
	for i := range 16 {
		f := 0
		if i == 0 {
			f |= 1
		}
		if i == 15 {
			f |= 2
		}
		g.f("DATA chunkflags<>+%d(SB)/4, $%d", 4*i, f)
	}
	g.f("GLOBL chunkflags<>(SB), RODATA|NOPTR, $64")
	g.f("DATA parentflag<>+0(SB)/4, $4")
	g.f("GLOBL parentflag<>(SB), RODATA|NOPTR, $4")
	for i := range 32 { // even lane indices, then odd ones
		g.f("DATA evenodd<>+%d(SB)/4, $%d", 4*i, 2*(i%16)+i/16)
	}
	g.f("GLOBL evenodd<>(SB), RODATA|NOPTR, $128")
	g.f("")

	// chunks16: sixteen whole 1 KiB chunks, lane j hashing the chunk at
	// buf+j*1024 with counter ctr[0][j] | ctr[1][j]<<32.
	g.f("// func chunks16(cvs *[8][16]uint32, buf *[16384]byte, ctr *[2][16]uint32)")
	g.f("TEXT ·chunks16(SB), NOSPLIT, $0-24")
	g.f("\tMOVQ cvs+0(FP), DI")
	g.f("\tMOVQ buf+8(FP), SI")
	g.f("\tMOVQ ctr+16(FP), CX")
	g.f("\tLEAQ chunkflags<>(SB), R8")
	g.f("\tXORQ DX, DX")
	g.loadIV()
	g.f("chunkloop:")
	r := newRegs()
	var rows [16]int
	for j := range 16 {
		rows[j] = r.get()
		g.f("\tVMOVDQU32 %d(SI), %s", 1024*j, z(rows[j]))
	}
	msg := g.transpose(r, rows)
	v := g.state(r, "CX", "(R8)(DX*4)")
	g.compress(v, msg)
	g.f("\tADDQ $64, SI")
	g.f("\tINCQ DX")
	g.f("\tCMPQ DX, $16")
	g.f("\tJNE chunkloop")
	g.storeCV("DI")
	g.f("\tVZEROUPPER")
	g.f("\tRET")
	g.f("")

	// parents16: the sixteen parents of the thirty-two chaining values in
	// (word-major, two groups of sixteen), parent j of values 2j and 2j+1.
	g.f("// func parents16(out *[8][16]uint32, in *[2][8][16]uint32)")
	g.f("TEXT ·parents16(SB), NOSPLIT, $0-16")
	g.f("\tMOVQ out+0(FP), DI")
	g.f("\tMOVQ in+8(FP), SI")
	r = newRegs()
	even, odd := r.get(), r.get()
	g.f("\tVMOVDQU32 evenodd<>+0(SB), %s", z(even))
	g.f("\tVMOVDQU32 evenodd<>+64(SB), %s", z(odd))
	for i := range 8 {
		for k, idx := range []int{even, odd} {
			m := r.get()
			msg[8*k+i] = m
			g.f("\tVMOVDQU32 %d(SI), %s", 64*i, z(m))
			g.f("\tVPERMT2D %d(SI), %s, %s", 512+64*i, z(idx), z(m))
		}
	}
	r.put(even)
	r.put(odd)
	g.loadIV()
	v = g.state(r, "", "parentflag<>(SB)")
	g.compress(v, msg)
	g.storeCV("DI")
	g.f("\tVZEROUPPER")
	g.f("\tRET")

	if err := os.WriteFile(*out, []byte(g.b.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
