package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadSecretFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		require.NoError(t, os.Chmod(p, mode))
		return p
	}
	got, err := ReadSecretFile(write("ok", "s3cret-value\n", 0o600))
	require.NoError(t, err)
	assert.Equal(t, "s3cret-value", string(got))
	_, err = ReadSecretFile(write("ro", "s3cret-value", 0o400))
	require.NoError(t, err)

	for _, mode := range []os.FileMode{0o640, 0o604, 0o660, 0o602, 0o644} {
		p := write("open", "s3cret-value", mode)
		_, err := ReadSecretFile(p)
		require.ErrorIs(t, err, ErrSecretFileMode, "%04o", mode)
		assert.NotContains(t, err.Error(), "s3cret-value")
		assert.Contains(t, err.Error(), "chmod 600")
	}
	_, err = ReadSecretFile(write("empty", "\n", 0o600))
	assert.ErrorContains(t, err, "empty")
	_, err = ReadSecretFile(dir)
	assert.ErrorContains(t, err, "not a regular file")
	_, err = ReadSecretFile(filepath.Join(dir, "missing"))
	assert.Error(t, err)
	// A symlink is followed to its target, whose own mode is what counts.
	target := write("target", "s3cret-value", 0o644)
	link := filepath.Join(dir, "link")
	require.NoError(t, os.Symlink(target, link))
	_, err = ReadSecretFile(link)
	require.ErrorIs(t, err, ErrSecretFileMode)
}
