package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

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

// delete carries out an authorised delete. Each kept file is re-hashed
// first; unless at least one still matches the group, nothing is removed
// (the last copy is never deleted). Each file to delete is then re-hashed
// right before removal and removed only if it still matches the group.
// Every decision is recorded.
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
			Decision: decision, Reason: reason, TrashPath: trash,
		})
	}
	total := int64(len(p.KeepFileIDs) + len(p.DeleteFileIDs))
	var done int64
	step := func() { done++; c.SetProgress(done, float64(done)/float64(max(total, 1))) }

	verifiedKeep := 0
	for _, id := range p.KeepFileIDs {
		f, reason := x.verifyMember(ctx, id, key)
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
		verifiedKeep++
		if err := record(f, DecisionKeep, "kept copy verified by re-hash", nil); err != nil {
			return err
		}
	}
	removed, refused := 0, 0
	for _, id := range p.DeleteFileIDs {
		if verifiedKeep == 0 {
			f, _ := x.Store.GetFile(ctx, id)
			f.ID = id
			refused++
			step()
			if err := record(f, DecisionRefused, "no kept copy of the group was verified; refusing to delete what may be the last copy", nil); err != nil {
				return err
			}
			continue
		}
		f, reason := x.verifyMember(ctx, id, key)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		step()
		if reason != "" {
			refused++
			if err := record(f, DecisionRefused, reason, nil); err != nil {
				return err
			}
			continue
		}
		decision, trash, err := x.removeFile(c.Job.ID, f, p.Permanent)
		if err != nil {
			refused++
			if err := record(f, DecisionRefused, "removal failed: "+err.Error(), nil); err != nil {
				return err
			}
			continue
		}
		removed++
		if err := record(f, decision, "re-hash matched the group", trash); err != nil {
			return err
		}
	}
	if refused > 0 && removed == 0 {
		return &refusedError{code: CodeDeleteRefused, msg: fmt.Sprintf("refused all %d deletions; see the recorded decisions", refused)}
	}
	return nil
}

// verifyMember re-hashes file id and returns "" when it is still a live
// member of group k, else the reason it is not.
func (x *Executor) verifyMember(ctx context.Context, id int64, k store.GroupKey) (store.File, string) {
	f, err := x.Store.GetFile(ctx, id)
	if err != nil {
		return store.File{ID: id}, "file not found"
	}
	if f.IsMissing || f.NeedsHash || f.HashAlgorithm == nil || f.ContentHash == nil ||
		*f.HashAlgorithm != k.Algorithm || *f.ContentHash != k.HashHex {
		return f, "file is no longer a current member of the group"
	}
	digest, size, mtime, err := x.HashFile(ctx, f.Path, k.Algorithm, nil)
	if err != nil {
		return f, "re-hash failed: " + err.Error()
	}
	if digest != k.HashHex {
		_ = x.Catalog.MarkNeedsHash(context.WithoutCancel(ctx), f.ID)
		return f, "content changed: re-hash no longer matches the group"
	}
	if size != f.SizeBytes || mtime != f.MtimeNS {
		_ = x.Catalog.MarkNeedsHash(context.WithoutCancel(ctx), f.ID)
		return f, "file changed since it was hashed"
	}
	return f, ""
}

// removeFile moves f into trash/<job>/<file id>/<name>, or unlinks it when
// permanent. A trash on another filesystem (EXDEV) is reached by copying
// the file, syncing the copy, then removing the original. The path is re-resolved under the roots first and a symlink is
// never removed.
func (x *Executor) removeFile(jobID int64, f store.File, permanent bool) (string, *string, error) {
	real, _, err := x.Roots.Resolve(f.Path)
	if err != nil {
		return "", nil, err
	}
	if st, err := os.Lstat(real); err != nil || !st.Mode().IsRegular() {
		return "", nil, fmt.Errorf("%s is not a regular file", f.Path)
	}
	if permanent {
		if err := os.Remove(real); err != nil {
			return "", nil, err
		}
		return DecisionRemoved, nil, nil
	}
	rel := filepath.Join(strconv.FormatInt(jobID, 10), strconv.FormatInt(f.ID, 10), filepath.Base(real))
	dst, err := x.Trash.Join(rel)
	if err != nil {
		return "", nil, err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
		return "", nil, err
	}
	if err := x.Trash.Contains(dst); err != nil {
		return "", nil, err
	}
	rename := x.rename
	if rename == nil {
		rename = os.Rename
	}
	if err := rename(real, dst); err != nil {
		if !errors.Is(err, syscall.EXDEV) {
			return "", nil, err
		}
		if err := copyFile(real, dst); err != nil {
			return "", nil, err
		}
		if err := os.Remove(real); err != nil {
			return "", nil, err
		}
	}
	return DecisionTrashed, &dst, nil
}

// copyFile copies src to dst (new file) and syncs it, for a trash on
// another filesystem.
func copyFile(src, dst string) error {
	in, err := os.OpenFile(src, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		os.Remove(dst)
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
