package library

import (
	"context"
	"fmt"
	"runtime"

	"golang.org/x/sys/cpu"

	"github.com/vesta-cx/euterpe/edge/library/store"
)

// HashAuto is EUTERPE_LIBRARY_HASH's default: keep the algorithm the
// catalog already uses, and give a catalog that never hashed anything the
// faster algorithm of the machine (machineHashAlgorithm).
const HashAuto = "auto"

// machineHashAlgorithm is the algorithm a new catalog gets under HashAuto
// on goarch, sha2 saying whether the CPU has the ARMv8 SHA-2 instructions.
// On arm64 (the Jetson) neither BLAKE3 package has assembly, so BLAKE3 is
// pure Go there, while Go's SHA-256 runs on those instructions: published
// figures put pure-Go BLAKE3 at about 1 GB/s on an Apple M4 and SHA-256 at
// 1.5 GB/s on a Neoverse-N1 and 2.3 GB/s on an M1, and on an edge box that
// shares its cores with model servers the CPU per byte is what counts.
// An arm64 core without them (a Cortex-A72, say) runs SHA-256 in Go at
// about a tenth of that, so it keeps BLAKE3, as every other machine does
// (BLAKE3 has AVX2 and AVX-512 kernels on amd64).
func machineHashAlgorithm(goarch string, sha2 bool) string {
	if goarch == "arm64" && sha2 {
		return store.AlgoSHA256
	}
	return store.AlgoBLAKE3
}

// thisMachine describes the machine for machineHashAlgorithm.
func thisMachine() (goarch string, sha2 bool) { return runtime.GOARCH, cpu.ARM64.HasSHA2 }

// catalogAlgorithm reads the algorithm of a catalog's digests ("" none).
type catalogAlgorithm interface {
	CatalogAlgorithm(ctx context.Context) (string, error)
}

// resolveHashAlgorithm turns the setting into the algorithm hash jobs use,
// and says why. An algorithm set by name is used as it is (changing it
// re-hashes the library); HashAuto never does: a catalog that holds or
// held digests, or queued a hash job, keeps that algorithm (see
// store.CatalogAlgorithm), so neither an upgrade nor a machine of another
// architecture starts re-hashing a library, and only a catalog that never
// hashed anything takes the machine's algorithm.
func resolveHashAlgorithm(ctx context.Context, cat catalogAlgorithm, setting, goarch string, sha2 bool) (algo, why string, err error) {
	if setting != HashAuto {
		return setting, "EUTERPE_LIBRARY_HASH", nil
	}
	held, err := cat.CatalogAlgorithm(ctx)
	if err != nil {
		return "", "", fmt.Errorf("choose the library's hash algorithm: %w", err)
	}
	if held != "" {
		return held, "the catalog", nil
	}
	why = "new catalog on " + goarch
	if goarch == "arm64" && !sha2 {
		why += " without SHA-2 instructions"
	}
	return machineHashAlgorithm(goarch, sha2), why, nil
}
