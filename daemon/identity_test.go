package daemon

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Without POD_NAME and HOSTNAME (systemd sets neither) the identity is
// minted once and kept in the state directory, so a restart keeps it.
func TestPersistentWorkerID(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	dir := t.TempDir()

	got, err := PersistentWorkerID(env(map[string]string{"POD_NAME": "pod-a", "HOSTNAME": "h"}), dir)
	require.NoError(t, err)
	require.Equal(t, "pod-a", got)
	got, err = PersistentWorkerID(env(map[string]string{"HOSTNAME": "h"}), dir)
	require.NoError(t, err)
	require.Equal(t, "h", got)
	require.NoFileExists(t, filepath.Join(dir, IdentityFile), "no file while the environment names the worker")

	first, err := PersistentWorkerID(env(nil), dir)
	require.NoError(t, err)
	require.NotEqual(t, BootID(), first)
	b, err := os.ReadFile(filepath.Join(dir, IdentityFile))
	require.NoError(t, err)
	require.Equal(t, first+"\n", string(b))
	again, err := PersistentWorkerID(env(nil), dir) // the next start
	require.NoError(t, err)
	require.Equal(t, first, again)

	other, err := PersistentWorkerID(env(nil), filepath.Join(t.TempDir(), "missing", "state"))
	require.NoError(t, err, "the state directory is created")
	require.NotEqual(t, first, other, "another state directory is another worker")

	leftovers, _ := filepath.Glob(filepath.Join(dir, IdentityFile+".*"))
	require.Empty(t, leftovers)
}

// Daemons starting at once on one new state directory agree on one identity.
func TestPersistentWorkerIDConcurrentStarts(t *testing.T) {
	dir := t.TempDir()
	ids := make([]string, 16)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Go(func() {
			id, err := PersistentWorkerID(func(string) string { return "" }, dir)
			require.NoError(t, err)
			ids[i] = id
		})
	}
	wg.Wait()
	for _, id := range ids {
		require.Equal(t, ids[0], id)
	}
}

// A damaged identity file stops the start with an error naming it instead
// of silently becoming a new consumer.
func TestPersistentWorkerIDCorruptFile(t *testing.T) {
	for _, content := range []string{"", "\n", "two words\n", "a\nb\n", "bad\x00byte"} {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, IdentityFile), []byte(content), 0o600))
		_, err := PersistentWorkerID(func(string) string { return "" }, dir)
		require.ErrorContains(t, err, IdentityFile, "content %q", content)
	}
}

// A state directory the identity cannot be written to (a full disk, a
// read-only or unmountable card after the directory was wiped) does not
// stop the start: this run gets an identity of its own and the error says
// it is not kept, for the caller to warn that the next start takes another.
func TestPersistentWorkerIDNotKept(t *testing.T) {
	env := func(string) string { return "" }
	dangling := filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.Symlink(filepath.Join(t.TempDir(), "card", "state"), dangling))
	aFile := filepath.Join(t.TempDir(), "state")
	require.NoError(t, os.WriteFile(aFile, nil, 0o600))
	for name, dir := range map[string]string{"a link to a card not mounted": dangling, "a file in its place": aFile} {
		t.Run(name, func(t *testing.T) {
			id, err := PersistentWorkerID(env, dir)
			require.ErrorIs(t, err, ErrIdentityNotKept)
			require.Regexp(t, `^.+-[0-9a-f]{8}$`, id)
			again, err := PersistentWorkerID(env, dir)
			require.ErrorIs(t, err, ErrIdentityNotKept)
			require.NotEqual(t, id, again, "each start its own")
		})
	}
}
