package executor_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/edge/library/executor"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// TestDeleteRerunRecordsFileMovedBeforeCrash leaves the filesystem as a
// delete killed (SIGKILL, power loss) right after moving its file into
// the trash leaves it: the file at trash/<job>/<file>/<name>, gone from
// its path, and no decision recorded. The re-run must record where the
// file is, not refuse it as missing: a refusal would tell the user the
// file was kept while the retention empties it from the trash later.
func TestDeleteRerunRecordsFileMovedBeforeCrash(t *testing.T) {
	for _, permanent := range []bool{false, true} {
		t.Run("permanent="+strconv.FormatBool(permanent), func(t *testing.T) {
			e := newEnv(t, true)
			kept, del, fk, fd := dupPair(t, e)
			keptIno := inode(t, kept)
			j := requestPair(t, e, fk, fd, permanent)
			moved := filepath.Join(e.x.Trash.Path(), strconv.FormatInt(j.ID, 10), strconv.FormatInt(fd.ID, 10), filepath.Base(del))
			if err := os.MkdirAll(filepath.Dir(moved), 0o750); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(del, moved); err != nil {
				t.Fatal(err)
			}
			got := e.runJob()
			d := decisions(t, e, j.ID)[fd.ID]
			if got.Status != store.StatusCompleted || d.Decision != executor.DecisionTrashed {
				t.Fatalf("job %s, decision %+v: want completed, trashed", got.Status, d)
			}
			if d.TrashPath == nil || *d.TrashPath != moved {
				t.Fatalf("trash path %v, want %s", d.TrashPath, moved)
			}
			if data, err := os.ReadFile(moved); err != nil || string(data) != dupContent {
				t.Fatalf("trash copy: %q %v", data, err)
			}
			keptIntact(t, kept, keptIno, true)
		})
	}
	// An entry with other content (another library database's job with
	// the same numbers) is not taken for the file.
	t.Run("other content", func(t *testing.T) {
		e := newEnv(t, true)
		_, del, fk, fd := dupPair(t, e)
		j := requestPair(t, e, fk, fd, false)
		stray := filepath.Join(e.x.Trash.Path(), strconv.FormatInt(j.ID, 10), strconv.FormatInt(fd.ID, 10), filepath.Base(del))
		if err := os.MkdirAll(filepath.Dir(stray), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(stray, []byte("something else"), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(del); err != nil {
			t.Fatal(err)
		}
		e.runJob()
		if d := decisions(t, e, j.ID)[fd.ID]; d.Decision != executor.DecisionRefused || d.TrashPath != nil {
			t.Fatalf("decision %+v: want refused", d)
		}
	})
	// The kept copy renamed over the deleted path by hand in the instant
	// before the move, and caught by it: the re-run finds the group's
	// content in the entry, but not the inode it catalogued for the file,
	// so it does not record the kept copy as the trashed duplicate (the
	// retention would then empty the library's last copy). The refusal
	// names what is in the trash.
	t.Run("the kept copy caught by the move", func(t *testing.T) {
		e := newEnv(t, true)
		kept, del, fk, fd := dupPair(t, e)
		j := requestPair(t, e, fk, fd, false)
		caught := filepath.Join(e.x.Trash.Path(), strconv.FormatInt(j.ID, 10), strconv.FormatInt(fd.ID, 10), filepath.Base(del))
		if err := os.MkdirAll(filepath.Dir(caught), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(kept, del); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(del, caught); err != nil {
			t.Fatal(err)
		}
		e.runJob()
		d := decisions(t, e, j.ID)[fd.ID]
		if d.Decision == executor.DecisionTrashed {
			t.Fatalf("the kept copy was recorded as the trashed duplicate: %+v", d)
		}
		if !strings.Contains(d.Reason, caught) {
			t.Fatalf("the refusal does not name what is in the trash: %q", d.Reason)
		}
		if data, err := os.ReadFile(caught); err != nil || string(data) != dupContent {
			t.Fatalf("the caught copy: %q %v", data, err)
		}
	})
}
