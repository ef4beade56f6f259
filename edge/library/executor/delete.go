package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

// DeletePayload is what the policy side authorised for a delete job.
type DeletePayload struct {
	GroupKey      string  `json:"group_key"`
	KeepFileIDs   []int64 `json:"keep_file_ids"`
	DeleteFileIDs []int64 `json:"delete_file_ids"`
	// Permanent removes files instead of moving them to the trash.
	Permanent bool `json:"permanent"`
}

// Decision values recorded in delete_decisions.
const (
	DecisionKeep    = "keep"
	DecisionTrashed = "trashed"
	DecisionRemoved = "removed"
	DecisionRefused = "refused"

	CodeDeleteRefused = "delete_refused"
)

// delete carries out an authorised delete. Each kept file is verified
// first (pinned and re-hashed, see verifyMember); unless at least one
// still matches the group, nothing is removed (the last copy is never
// deleted). Each file to delete is then verified the same way, refused
// when it is the same file as a kept one (a hard link or a bind mount of
// it), and removed by remove, which checks again right before the act.
// Every decision is recorded; a file moved or removed has its decision
// recorded even when the job is being stopped, and a re-run of the job
// skips the files it already moved or removed, and finishes or undoes a
// move to a trash on another filesystem that a kill left staged.
func (x *Executor) delete(ctx context.Context, c *Claim) error {
	var p DeletePayload
	if err := json.Unmarshal([]byte(c.Job.Payload), &p); err != nil {
		return &refusedError{code: CodeBadPayload, msg: "delete payload: " + err.Error()}
	}
	key, err := store.ParseGroupKey(p.GroupKey)
	if err != nil {
		return &refusedError{code: CodeBadPayload, msg: err.Error()}
	}
	record := func(f store.File, decision, reason string, trash *string) error {
		return x.Catalog.RecordDecision(context.WithoutCancel(ctx), store.Decision{
			JobID: c.Job.ID, GroupKey: key.String(), FileID: f.ID, Path: f.Path,
			Decision: decision, Reason: daemon.CapMessage(reason), TrashPath: trash,
		})
	}
	// A refusal also names what a run of this job left in the file's trash
	// entry without recording it (killed after its move): the retention
	// empties the entry, and no other decision says it is there.
	refuse := func(f store.File, reason string) error {
		return record(f, DecisionRefused, x.leftInTrash(c.Job.ID, f, reason)+reason, nil)
	}
	// A re-run (lease expired, daemon restarted) would find a file this
	// job already moved or removed gone from its path and refuse it.
	acted, err := x.actedOn(ctx, c.Job.ID)
	if err != nil {
		return err
	}
	total := int64(len(p.KeepFileIDs) + len(p.DeleteFileIDs))
	var done int64
	step := func() { done++; c.SetProgress(done, float64(done)/float64(max(total, 1))) }

	var kept []*pinned
	for _, id := range p.KeepFileIDs {
		f, pn, reason := x.verifyMember(ctx, id, key)
		pn.close() // a kept file is re-checked by path and identity, never opened again
		if ctx.Err() != nil {
			return ctx.Err()
		}
		step()
		if reason != "" {
			if err := record(f, DecisionRefused, "kept copy not verified: "+reason, nil); err != nil {
				return err
			}
			continue
		}
		kept = append(kept, pn)
		if err := record(f, DecisionKeep, "kept copy verified by re-hash", nil); err != nil {
			return err
		}
	}
	removed, refused := 0, 0
	for _, id := range p.DeleteFileIDs {
		if acted[id] {
			removed++
			step()
			continue
		}
		if f, reason, err := x.recoverStaged(ctx, c.Job.ID, id, key, kept); err != nil {
			return err
		} else if reason != "" {
			refused++
			step()
			if err := refuse(f, reason); err != nil {
				return err
			}
			continue
		}
		if f, trash, ok := x.movedBefore(ctx, c.Job.ID, id, key, p.KeepFileIDs); ok {
			removed++
			step()
			if err := x.recordActed(f, &trash, func() error {
				return record(f, DecisionTrashed, "moved to the trash by an earlier run of this job stopped before it recorded the move", &trash)
			}); err != nil {
				return err
			}
			continue
		}
		if len(kept) == 0 {
			f, _ := x.Store.GetFile(ctx, id)
			f.ID = id
			refused++
			step()
			if err := refuse(f, "no kept copy of the group was verified; refusing to delete what may be the last copy"); err != nil {
				return err
			}
			continue
		}
		decision, trash, f, reason := x.deleteOne(ctx, c.Job.ID, id, key, kept, p.Permanent)
		if reason != "" && ctx.Err() != nil {
			// Nothing was moved; the refusal may only be the interruption
			// itself, so the re-run decides this file.
			return ctx.Err()
		}
		step()
		if reason != "" {
			refused++
			if err := refuse(f, reason); err != nil {
				return err
			}
			continue
		}
		removed++
		// Recorded even when ctx has ended meanwhile: the file is gone from
		// its path, and only this decision says where it went.
		if err := x.recordActed(f, trash, func() error { return record(f, decision, "re-hash matched the group", trash) }); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if refused > 0 && removed == 0 {
		return &refusedError{code: CodeDeleteRefused, msg: fmt.Sprintf("refused all %d deletions; see the recorded decisions", refused)}
	}
	return nil
}

// deleteOne verifies file id and removes it, or returns why it did not.
func (x *Executor) deleteOne(ctx context.Context, jobID, id int64, key store.GroupKey, kept []*pinned, permanent bool) (string, *string, store.File, string) {
	f, pn, reason := x.verifyMember(ctx, id, key)
	defer pn.close()
	if reason != "" {
		return "", nil, f, reason
	}
	if k := sameAsKept(pn, kept); k != nil {
		return "", nil, f, fmt.Sprintf("%s is the same file as kept %s (device %d, inode %d): a hard link or mount of the kept copy; removing it would leave one copy fewer than the group shows",
			f.Path, k.path, pn.key.dev, pn.key.ino)
	}
	if x.afterVerify != nil {
		x.afterVerify(f.Path)
	}
	if ctx.Err() != nil {
		// the lease is lost or the daemon stops: never act after that
		return "", nil, f, "delete interrupted before the file was moved"
	}
	decision, trash, err := x.remove(ctx, jobID, f.ID, pn, key, kept, permanent)
	if err != nil {
		return "", nil, f, "removal refused: " + err.Error()
	}
	return decision, trash, f, ""
}

// actedOn returns the files job jobID has already trashed or removed, by
// their recorded decisions.
func (x *Executor) actedOn(ctx context.Context, jobID int64) (map[int64]bool, error) {
	ds, err := x.Store.Decisions(ctx, jobID)
	if err != nil {
		return nil, fmt.Errorf("decisions of job %d: %w", jobID, err)
	}
	acted := map[int64]bool{}
	for _, d := range ds {
		if d.Decision == DecisionTrashed || d.Decision == DecisionRemoved {
			acted[d.FileID] = true
		}
	}
	return acted, nil
}

// actedRecordWaits are the pauses between attempts to record the decision
// for a file already moved or removed: a busy or briefly failing database
// usually recovers within a second, and a stopping daemon is held no
// longer than that.
var actedRecordWaits = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond}

// recordActed runs record, the decision for file f just moved to trash
// (nil: removed), retrying it: a lost decision leaves the row looking
// present, no one knowing where the trash copy is, and the retention
// deleting it later. The waits ignore ctx, as record does. When every
// attempt fails, the error says where the file went.
func (x *Executor) recordActed(f store.File, trash *string, record func() error) error {
	var err error
	for i := 0; ; i++ {
		if err = record(); err == nil {
			return nil
		}
		if i == len(actedRecordWaits) {
			break
		}
		time.Sleep(actedRecordWaits[i])
	}
	what := fmt.Sprintf("file %d removed", f.ID)
	if trash != nil {
		what = fmt.Sprintf("file %d moved to %s", f.ID, *trash)
	}
	err = fmt.Errorf("%s but the decision was not recorded: %w", what, err)
	x.Log.Error("delete decision lost", "file_id", f.ID, "path", f.Path, "err", err)
	return err
}

// movedBefore finds file id in the trash entry an earlier run of job jobID
// moved it to and was stopped (SIGKILL, power loss) before recording:
// the recorded path is gone and trash/<job>/<file>/<name> is a regular
// file with the group's content, reached without a symlink or a mount
// point. The move into that entry was the earlier run's, made under the
// delete lock after every check; verifying again would find the path
// missing and record a refusal, leaving the copy in the trash unaccounted
// for until the retention removes it.
func (x *Executor) movedBefore(ctx context.Context, jobID, id int64, k store.GroupKey, keepIDs []int64) (store.File, string, bool) {
	f, err := x.Store.GetFile(ctx, id)
	if err != nil || f.Path == "" {
		return f, "", false
	}
	var st unix.Stat_t
	if err := unix.Lstat(f.Path, &st); !errors.Is(err, unix.ENOENT) {
		return f, "", false
	}
	dir, err := x.openTrashEntry(jobID, id, false)
	if err != nil {
		return f, "", false
	}
	defer dir.Close()
	p := filepath.Join(dir.Name(), filepath.Base(f.Path))
	fd, err := unix.Openat(int(dir.Fd()), filepath.Base(p), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return f, "", false
	}
	file := os.NewFile(uintptr(fd), p)
	defer file.Close()
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return f, "", false
	}
	// A kept copy renamed over this path by hand in the instant before the
	// move is caught by it, and has the group's content too: recorded as
	// the trashed duplicate, the library would hold no copy and the
	// retention would empty the last one. A rename keeps the inode, so it
	// is told apart by the kept files' catalogued (device, inode). (A copy
	// into a trash on another mount has an inode of its own, and was made
	// from the descriptor of the file to delete.)
	for _, kid := range keepIDs {
		if kf, err := x.Store.GetFile(ctx, kid); err != nil ||
			(kf.Dev != nil && kf.Inode != nil && int64(st.Dev) == *kf.Dev && int64(st.Ino) == *kf.Inode) {
			return f, "", false
		}
	}
	// Only the group's content is that file: an entry of another library
	// database's job with the same numbers, or whatever was caught in the
	// instant between that run's move and its check, is not claimed.
	digest, err := HashReader(ctx, file, k.Algorithm, nil)
	if err != nil || digest != k.HashHex {
		return f, "", false
	}
	return f, p, true
}

// leftInTrash names the entry trash/<job>/<file>/<name> of file f when
// something is there that the refusal reason does not already name: a run
// of job jobID moved it there (the file, or what was swapped in for it)
// and was stopped before it recorded or checked the move.
func (x *Executor) leftInTrash(jobID int64, f store.File, reason string) string {
	if f.Path == "" {
		return ""
	}
	dir, err := x.openTrashEntry(jobID, f.ID, false)
	if err != nil {
		return ""
	}
	defer dir.Close()
	p := filepath.Join(dir.Name(), filepath.Base(f.Path))
	var st unix.Stat_t
	if strings.Contains(reason, p) || unix.Fstatat(int(dir.Fd()), filepath.Base(f.Path), &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return ""
	}
	return fmt.Sprintf("%s is in this job's trash entry for the file, not recorded as its move (the retention will empty it); ", p)
}

func sameAsKept(p *pinned, kept []*pinned) *pinned {
	for _, k := range kept {
		if k.key == p.key {
			return k
		}
	}
	return nil
}

// verifyMember pins file id's recorded path (see pin: no symlink, no
// moved directory, inside the roots) and re-hashes the opened descriptor.
// It returns the pinned file and "" when the file is still a live member
// of group k with the size and mtime it was hashed with, else the reason
// it is not (and a nil pin).
func (x *Executor) verifyMember(ctx context.Context, id int64, k store.GroupKey) (store.File, *pinned, string) {
	f, err := x.Store.GetFile(ctx, id)
	if err != nil {
		return store.File{ID: id}, nil, "file not found"
	}
	if f.IsMissing || f.NeedsHash || f.HashAlgorithm == nil || f.ContentHash == nil ||
		*f.HashAlgorithm != k.Algorithm || *f.ContentHash != k.HashHex {
		return f, nil, "file is no longer a current member of the group"
	}
	pn, err := x.pin(f.Path)
	if err != nil {
		return f, nil, "path check failed: " + err.Error()
	}
	digest, err := pn.hash(ctx, k.Algorithm)
	if err != nil {
		pn.close()
		return f, nil, "re-hash failed: " + err.Error()
	}
	if digest != k.HashHex {
		pn.close()
		_ = x.Catalog.MarkNeedsHash(context.WithoutCancel(ctx), f.ID)
		return f, nil, "content changed: re-hash no longer matches the group"
	}
	if pn.size != f.SizeBytes || pn.mtimeNS != f.MtimeNS {
		pn.close()
		_ = x.Catalog.MarkNeedsHash(context.WithoutCancel(ctx), f.ID)
		return f, nil, "file changed since it was hashed"
	}
	return f, pn, ""
}
