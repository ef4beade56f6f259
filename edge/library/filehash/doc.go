// Package filehash computes the content hash the library records for a
// file (BLAKE3 or SHA-256) with positioned reads, never mmap: a file
// truncated under a mapping would kill the daemon with SIGBUS, while a
// short read is only an error. A Pool of CPU-bound workers is shared by
// every file a hash job has in flight, so several files are hashed at once;
// a large BLAKE3 file is cut into segments of a power-of-two number of
// 1 KiB chunks, each segment's subtree is hashed on any worker and the
// chaining values are merged in the shape the BLAKE3 tree prescribes, so the
// digest is b3sum's. On amd64 a whole segment goes through kernels of our
// own (blake3_amd64.s, written by asmgen.go): sixteen chunks, then sixteen
// parents, per call (AVX-512; on AVX2 two calls of eight), with message
// words loaded as rows and transposed by shuffles instead of gathered, and
// the four G functions of a half-round interleaved — on one core 1.7× what
// lukechampine.com/blake3/guts does with AVX-512, 1.27× with AVX2. File
// tails, other CPUs and arm64 use guts. A file whose size or modification
// time differs after the hash from before it reports ErrChanged, which the
// caller retries.
package filehash
