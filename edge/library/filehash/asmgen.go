//go:build ignore

// asmgen writes blake3_amd64.s: the kernels of the segment hasher, for
// AVX-512 (chunks16, parents16) and AVX2 (chunks8, parents8). Run with
// `go generate` in this package on amd64 (the directive is in
// kernel_amd64.go) or `go run asmgen.go -out blake3_amd64.s` anywhere.
//
// Each kernel compresses sixteen (eight) BLAKE3 inputs at once, one per
// 32-bit lane of the zmm (ymm) registers. The four G functions of a
// half-round are emitted step by step side by side rather than one after
// another, so every step offers the core four independent instructions;
// message words are loaded as whole 64-byte rows and transposed with
// shuffles (no gathers). AVX-512 keeps the message in the sixteen registers
// it has beyond the state; AVX2 has only the state's sixteen, so its message
// and chaining value live on the stack, and its 12- and 7-bit rotations
// borrow a register parked there for the moment.
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

func y(n int) string { return fmt.Sprintf("Y%d", n) }

// regs hands out the registers [lo, hi) to a transposition's values and
// takes them back; name spells them.
type regs struct {
	free []int
	name func(int) string
}

func newRegs(lo, hi int, name func(int) string) *regs {
	r := &regs{name: name}
	for i := lo; i < hi; i++ {
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

// pair emits lo(a, b) into a fresh register and hi(a, b) into a's register
// (each op an instruction with its immediate, if any), releasing b's.
func (g *gen) pair(r *regs, lo, hi string, a, b int) (int, int) {
	t := r.get()
	g.f("\t%s%s, %s, %s", lo, r.name(b), r.name(a), r.name(t))
	g.f("\t%s%s, %s, %s", hi, r.name(b), r.name(a), r.name(a))
	r.put(b)
	return t, a
}

func imm(op string, v int) string { return fmt.Sprintf("%s $0x%02x, ", op, v) }

// transpose turns rows[j] (lane j's sixteen message words) into msg[i]
// (word i of every lane) and returns the registers holding msg.
func (g *gen) transpose(r *regs, rows [16]int) [16]int {
	var l1, h1 [8]int
	for p := range 8 {
		l1[p], h1[p] = g.pair(r, "VPUNPCKLDQ ", "VPUNPCKHDQ ", rows[2*p], rows[2*p+1])
	}
	var u [4][4]int // u[group][c]
	for grp := range 4 {
		u[grp][0], u[grp][1] = g.pair(r, "VPUNPCKLQDQ ", "VPUNPCKHQDQ ", l1[2*grp], l1[2*grp+1])
		u[grp][2], u[grp][3] = g.pair(r, "VPUNPCKLQDQ ", "VPUNPCKHQDQ ", h1[2*grp], h1[2*grp+1])
	}
	var msg [16]int
	lanes := func(a, b, lo, hi int) (int, int) {
		return g.pair(r, imm("VSHUFI32X4", lo), imm("VSHUFI32X4", hi), a, b)
	}
	for c := range 4 {
		lo01, hi01 := lanes(u[0][c], u[1][c], 0x44, 0xee)
		lo23, hi23 := lanes(u[2][c], u[3][c], 0x44, 0xee)
		msg[c], msg[4+c] = lanes(lo01, lo23, 0x88, 0xdd)
		msg[8+c], msg[12+c] = lanes(hi01, hi23, 0x88, 0xdd)
	}
	return msg
}

// transpose8 is transpose for eight lanes of eight words (AVX2: one half
// of a block's message at a time).
func (g *gen) transpose8(r *regs, rows [8]int) [8]int {
	var l1, h1 [4]int
	for p := range 4 {
		l1[p], h1[p] = g.pair(r, "VPUNPCKLDQ ", "VPUNPCKHDQ ", rows[2*p], rows[2*p+1])
	}
	var u [2][4]int // u[group][c]: word c in the low 128 bits, c+4 in the high
	for grp := range 2 {
		u[grp][0], u[grp][1] = g.pair(r, "VPUNPCKLQDQ ", "VPUNPCKHQDQ ", l1[2*grp], l1[2*grp+1])
		u[grp][2], u[grp][3] = g.pair(r, "VPUNPCKLQDQ ", "VPUNPCKHQDQ ", h1[2*grp], h1[2*grp+1])
	}
	var msg [8]int
	for c := range 4 {
		msg[c], msg[4+c] = g.pair(r, imm("VPERM2I128", 0x20), imm("VPERM2I128", 0x31), u[0][c], u[1][c])
	}
	return msg
}

// isa is what differs between the two instruction sets in a compression.
type isa struct {
	reg func(int) string   // register name
	xor string             // exclusive or
	msg func(i int) string // operand holding message word i
	// ror rotates each register of regs right by bits; borrow is a state
	// register it may use (and must give back) while it does.
	ror func(g *gen, bits int, regs []int, borrow int)
}

func avx512(msg [16]int) isa {
	return isa{reg: z, xor: "VPXORD", msg: func(i int) string { return z(msg[i]) },
		ror: func(g *gen, bits int, regs []int, _ int) {
			for _, r := range regs {
				g.f("\tVPRORD $%d, %s, %s", bits, z(r), z(r))
			}
		}}
}

// The AVX2 kernels keep the message words on the stack at 32*i(SP) and
// park a register at spill(SP) while they rotate by 12 or 7 bits (there is
// no rotate instruction: two shifts and an or need a register to spare).
func avx2(spill int) isa {
	return isa{reg: y, xor: "VPXOR", msg: func(i int) string { return fmt.Sprintf("%d(SP)", 32*i) },
		ror: func(g *gen, bits int, regs []int, borrow int) {
			if bits == 16 || bits == 8 { // whole bytes: one shuffle
				for _, r := range regs {
					g.f("\tVPSHUFB rot%d<>(SB), %s, %s", bits, y(r), y(r))
				}
				return
			}
			g.f("\tVMOVDQU %s, %d(SP)", y(borrow), spill)
			for _, r := range regs {
				g.f("\tVPSRLD $%d, %s, %s", bits, y(r), y(borrow))
				g.f("\tVPSLLD $%d, %s, %s", 32-bits, y(r), y(r))
				g.f("\tVPOR %s, %s, %s", y(borrow), y(r), y(r))
			}
			g.f("\tVMOVDQU %d(SP), %s", spill, y(borrow))
		}}
}

// state8 sets the AVX2 state registers Y8–Y15 as state does the AVX-512
// ones; counters come from ctr (low words, then high words 64 bytes on).
func (g *gen) state8(ctr, flags string) [16]int {
	var v [16]int
	for i := range 16 {
		v[i] = i
	}
	for i := range 4 {
		g.f("\tVPBROADCASTD iv<>+%d(SB), %s", 4*i, y(8+i))
	}
	if ctr == "" {
		g.f("\tVPXOR Y12, Y12, Y12")
		g.f("\tVPXOR Y13, Y13, Y13")
	} else {
		g.f("\tVMOVDQU (%s), Y12", ctr)
		g.f("\tVMOVDQU 64(%s), Y13", ctr)
	}
	g.f("\tVPBROADCASTD blocklen<>(SB), Y14")
	g.f("\tVPBROADCASTD %s, Y15", flags)
	return v
}

// compress runs the seven rounds over v (v[0:8] the chaining value, v[8:16]
// already set), leaving the new chaining value in v[0:8].
func (g *gen) compress(v [16]int, x isa) {
	for round := range 7 {
		s := schedule[round]
		g.half(v, [4][4]int{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}, x, s[0:8])
		g.half(v, [4][4]int{{0, 5, 10, 15}, {1, 6, 11, 12}, {2, 7, 8, 13}, {3, 4, 9, 14}}, x, s[8:16])
	}
	for i := range 8 {
		g.f("\t%s %s, %s, %s", x.xor, x.reg(v[i+8]), x.reg(v[i]), x.reg(v[i]))
	}
}

// half emits four G functions, one step of each at a time.
func (g *gen) half(v [16]int, cols [4][4]int, x isa, s []int) {
	r := x.reg
	each := func(fn func(a, b, c, d, k int)) {
		for k, col := range cols {
			fn(v[col[0]], v[col[1]], v[col[2]], v[col[3]], k)
		}
	}
	var bs, ds []int
	each(func(_, b, _, d, _ int) { bs, ds = append(bs, b), append(ds, d) })
	borrow := v[cols[0][2]] // c of the first column: not read again until the next mix
	mix := func(word int, rot1, rot2 int) {
		each(func(a, b, _, _, _ int) { g.f("\tVPADDD %s, %s, %s", r(b), r(a), r(a)) })
		each(func(a, _, _, _, k int) { g.f("\tVPADDD %s, %s, %s", x.msg(s[2*k+word]), r(a), r(a)) })
		each(func(a, _, _, d, _ int) { g.f("\t%s %s, %s, %s", x.xor, r(a), r(d), r(d)) })
		x.ror(g, rot1, ds, -1)
		each(func(_, _, c, d, _ int) { g.f("\tVPADDD %s, %s, %s", r(d), r(c), r(c)) })
		each(func(_, b, c, _, _ int) { g.f("\t%s %s, %s, %s", x.xor, r(c), r(b), r(b)) })
		x.ror(g, rot2, bs, borrow)
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
	// VPSHUFB masks rotating every 32-bit word right by 16 and by 8 bits
	for i, q := range []uint64{0x0504070601000302, 0x0d0c0f0e09080b0a, 0x0504070601000302, 0x0d0c0f0e09080b0a} {
		g.f("DATA rot16<>+%d(SB)/8, $0x%016x", 8*i, q)
	}
	g.f("GLOBL rot16<>(SB), RODATA|NOPTR, $32")
	for i, q := range []uint64{0x0407060500030201, 0x0c0f0e0d080b0a09, 0x0407060500030201, 0x0c0f0e0d080b0a09} {
		g.f("DATA rot8<>+%d(SB)/8, $0x%016x", 8*i, q)
	}
	g.f("GLOBL rot8<>(SB), RODATA|NOPTR, $32")
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
	r := newRegs(8, 32, z)
	var rows [16]int
	for j := range 16 {
		rows[j] = r.get()
		g.f("\tVMOVDQU32 %d(SI), %s", 1024*j, z(rows[j]))
	}
	msg := g.transpose(r, rows)
	v := g.state(r, "CX", "(R8)(DX*4)")
	g.compress(v, avx512(msg))
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
	r = newRegs(8, 32, z)
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
	g.compress(v, avx512(msg))
	g.storeCV("DI")
	g.f("\tVZEROUPPER")
	g.f("\tRET")

	g.f("")
	g.avx2Kernels()

	if err := os.WriteFile(*out, []byte(g.b.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// avx2Kernels writes chunks8 and parents8. Their chaining values are
// word-major rows 64 bytes apart, so two calls fill the sixteen-lane
// layout of chunks16 and parents16 (lanes 0–7, then 8–15).
func (g *gen) avx2Kernels() {
	// Frame: message 0–511, chaining value 512–767, parked register 768.
	g.f("// func chunks8(cvs *uint32, buf *byte, ctr *uint32)")
	g.f("TEXT ·chunks8(SB), 0, $800-24")
	g.f("\tMOVQ cvs+0(FP), DI")
	g.f("\tMOVQ buf+8(FP), SI")
	g.f("\tMOVQ ctr+16(FP), CX")
	g.f("\tLEAQ chunkflags<>(SB), R8")
	g.f("\tXORQ DX, DX")
	for i := range 8 {
		g.f("\tVPBROADCASTD iv<>+%d(SB), %s", 4*i, y(i))
		g.f("\tVMOVDQU %s, %d(SP)", y(i), 512+32*i)
	}
	g.f("chunk8loop:")
	for h := range 2 {
		r := newRegs(0, 16, y)
		var rows [8]int
		for j := range 8 {
			rows[j] = r.get()
			g.f("\tVMOVDQU %d(SI), %s", 1024*j+32*h, y(rows[j]))
		}
		for i, m := range g.transpose8(r, rows) {
			g.f("\tVMOVDQU %s, %d(SP)", y(m), 32*(8*h+i))
		}
	}
	for i := range 8 {
		g.f("\tVMOVDQU %d(SP), %s", 512+32*i, y(i))
	}
	g.compress(g.state8("CX", "(R8)(DX*4)"), avx2(768))
	for i := range 8 {
		g.f("\tVMOVDQU %s, %d(SP)", y(i), 512+32*i)
	}
	g.f("\tADDQ $64, SI")
	g.f("\tINCQ DX")
	g.f("\tCMPQ DX, $16")
	g.f("\tJNE chunk8loop")
	for i := range 8 {
		g.f("\tVMOVDQU %s, %d(DI)", y(i), 64*i)
	}
	g.f("\tVZEROUPPER")
	g.f("\tRET")
	g.f("")

	// parents8: parent j of values 2j and 2j+1 of sixteen, word w of values
	// 0–7 at in+64w and of values 8–15 at in+64w+32.
	g.f("// func parents8(out *uint32, in *uint32)")
	g.f("TEXT ·parents8(SB), 0, $544-16")
	g.f("\tMOVQ out+0(FP), DI")
	g.f("\tMOVQ in+8(FP), SI")
	for w := range 8 {
		g.f("\tVMOVDQU %d(SI), Y0", 64*w)
		g.f("\tVMOVDQU %d(SI), Y1", 64*w+32)
		for k, sel := range []int{0x88, 0xdd} { // even values, then odd
			g.f("\tVSHUFPS $0x%02x, Y1, Y0, Y2", sel)
			g.f("\tVPERMQ $0xd8, Y2, Y2")
			g.f("\tVMOVDQU Y2, %d(SP)", 32*(8*k+w))
		}
	}
	for i := range 8 {
		g.f("\tVPBROADCASTD iv<>+%d(SB), %s", 4*i, y(i))
	}
	g.compress(g.state8("", "parentflag<>(SB)"), avx2(512))
	for i := range 8 {
		g.f("\tVMOVDQU %s, %d(DI)", y(i), 64*i)
	}
	g.f("\tVZEROUPPER")
	g.f("\tRET")
}
