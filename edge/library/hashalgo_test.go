package library

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vesta-cx/euterpe/edge/library/store"
)

// The default never re-hashes a library: a catalog with digests keeps
// their algorithm on any machine, an empty one takes the machine's
// (SHA-256 on arm64, where BLAKE3 is pure Go), and a setting by name wins.
func TestResolveHashAlgorithm(t *testing.T) {
	cases := []struct {
		name    string
		setting string
		held    string // algorithm of the catalog's one hashed file, "" none
		goarch  string
		sha2    bool
		want    string
	}{
		{"new catalog on arm64", HashAuto, "", "arm64", true, store.AlgoSHA256},
		{"new catalog on arm64 without SHA-2 instructions", HashAuto, "", "arm64", false, store.AlgoBLAKE3},
		{"new catalog on amd64", HashAuto, "", "amd64", false, store.AlgoBLAKE3},
		{"blake3 catalog on arm64 is kept", HashAuto, store.AlgoBLAKE3, "arm64", true, store.AlgoBLAKE3},
		{"sha256 catalog on amd64 is kept", HashAuto, store.AlgoSHA256, "amd64", false, store.AlgoSHA256},
		{"named setting wins over the catalog", store.AlgoSHA256, store.AlgoBLAKE3, "amd64", false, store.AlgoSHA256},
		{"named setting wins over the machine", store.AlgoBLAKE3, "", "arm64", true, store.AlgoBLAKE3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			st, err := store.Open(ctx, filepath.Join(t.TempDir(), "library.db"))
			require.NoError(t, err)
			t.Cleanup(func() { _ = st.Close() })
			if c.held != "" {
				_, err := st.DB.ExecContext(ctx, `INSERT INTO library_files(root, path, size_bytes, mtime_ns, hash_algorithm, content_hash, is_missing, needs_hash)
VALUES ('/lib', '/lib/a', 1, 1, ?, ?, 0, 0)`, c.held, strings.Repeat("ab", 32))
				require.NoError(t, err)
			}
			got, why, err := resolveHashAlgorithm(ctx, st, c.setting, c.goarch, c.sha2)
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
			assert.NotEmpty(t, why)
		})
	}
}

type failingCatalog struct{}

func (failingCatalog) CatalogAlgorithm(context.Context) (string, error) {
	return "", errors.New("disk I/O error")
}

// A catalog that cannot be read stops the start: guessing an algorithm
// could re-hash the whole library.
func TestResolveHashAlgorithmUnreadableCatalog(t *testing.T) {
	_, _, err := resolveHashAlgorithm(context.Background(), failingCatalog{}, HashAuto, "arm64", true)
	require.ErrorContains(t, err, "disk I/O error")
	_, _, err = resolveHashAlgorithm(context.Background(), failingCatalog{}, store.AlgoSHA256, "arm64", true)
	require.NoError(t, err, "a named setting needs no catalog read")
}
