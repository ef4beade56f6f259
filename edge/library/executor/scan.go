package executor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/edge/library/pathsafe"
	"github.com/vesta-cx/euterpe/edge/library/store"
)

const scanBatch = 2000

// scan walks every root without following symlinks, records what it saw
// in a scan session and library_files, and marks files of the fully walked
// roots that it did not see as missing. A symlink is never followed: one
// that resolves outside every root is counted as refused, one inside a root
// is skipped because its target is walked on its own.
func (x *Executor) scan(ctx context.Context, c *Claim) error {
	roots := x.Roots.List()
	sid, err := x.Catalog.StartScanSession(ctx, c.Job.ID, roots)
	if err != nil {
		return fmt.Errorf("start scan session: %w", err)
	}
	var counts store.ScanCounts
	finish := func(status string, msg string) {
		if err := x.Catalog.FinishScanSession(context.WithoutCancel(ctx), sid, status, counts, msg); err != nil {
			x.Log.Warn("finish scan session", "session", sid, "err", err)
		}
	}
	var walked []string
	var rootErrs []string
	batch := make([]store.FileStat, 0, scanBatch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		n, ch, err := x.Catalog.UpsertFiles(ctx, sid, batch)
		if err != nil {
			return err
		}
		counts.New += n
		counts.Changed += ch
		batch = batch[:0]
		c.SetProgress(counts.Seen, 0)
		return nil
	}
	for _, root := range roots {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if p == root {
					return err
				}
				x.Log.Debug("scan: skip unreadable entry", "path", p, "err", err)
				if d != nil && d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if d.IsDir() {
				if x.skipDir(p) {
					return fs.SkipDir
				}
				return nil
			}
			if d.Type()&fs.ModeSymlink != 0 {
				if _, _, err := x.Roots.Resolve(p); errors.Is(err, pathsafe.ErrOutside) {
					counts.Refused++
				}
				return nil
			}
			if !d.Type().IsRegular() {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil // vanished during the walk
			}
			counts.Seen++
			batch = append(batch, store.FileStat{Root: root, Path: p, Size: info.Size(), MtimeNS: info.ModTime().UnixNano(), Ident: identOf(info)})
			if len(batch) >= scanBatch {
				return flush()
			}
			return nil
		})
		if err == nil {
			err = flush()
		}
		if ctx.Err() != nil {
			finish(store.StatusFailed, "scan interrupted")
			return ctx.Err()
		}
		if err != nil {
			rootErrs = append(rootErrs, fmt.Sprintf("%s: %v", root, err))
			batch = batch[:0]
			continue
		}
		walked = append(walked, root)
	}
	missing, err := x.Catalog.MarkMissing(ctx, sid, walked)
	if err != nil {
		finish(store.StatusFailed, err.Error())
		return fmt.Errorf("mark missing: %w", err)
	}
	counts.Missing = missing
	c.SetProgress(counts.Seen, 1)
	if len(rootErrs) > 0 {
		msg := daemon.CapMessage("roots not walked: " + strings.Join(rootErrs, "; "))
		finish(store.StatusFailed, msg)
		return errors.New(msg)
	}
	finish(store.StatusSucceeded, "")
	return nil
}

func (x *Executor) skipDir(p string) bool {
	for _, s := range x.SkipDirs {
		if s != "" && pathsafe.Under(s, p) {
			return true
		}
	}
	return false
}

// identOf is the ctime and (device, inode) of a stat, which the catalog
// compares besides size and mtime: a rewrite that keeps the size and
// restores the mtime (a tag editor preserving it) cannot restore the ctime.
func identOf(info fs.FileInfo) *store.FileIdent {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	return &store.FileIdent{
		CtimeNS: st.Ctim.Nano(),
		Dev:     int64(st.Dev),
		Inode:   int64(st.Ino),
	}
}
