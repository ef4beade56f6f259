package objstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// Dir is a directory store.
type Dir struct {
	Path string
}

// TmpMaxAge is the age past which a Put removes the temporary files left
// in its directory by writes that never finished (a crash, a power cut).
// It is far longer than any write takes, so a write in progress — another
// worker's, in the same directory — is never swept.
const TmpMaxAge = 6 * time.Hour

// tmpPrefix starts the name of a write's temporary file; CheckKey refuses
// keys starting with '.', so no object is ever named like one.
const tmpPrefix = ".tmp-"

// syncFile flushes a file or a directory to stable storage; tests replace
// it to see which directories a Put syncs.
var syncFile = (*os.File).Sync

// Put writes through an os.Root at d.Path: the object goes to a temporary
// file in its directory, is synced, and renamed over the key, so a reader
// sees the old bytes or the new, never a part. A ctx that ended (a worker
// fenced at its lease deadline) writes nothing, up to the rename: the key
// may hold a newer run's object by then.
//
// A Put that returns without error has made the object durable, whether it
// wrote it or found it there: the rename and any directory made for it are
// only durable once the directories holding them are synced, and the job's
// success, once committed, is never run again.
func (d Dir) Put(ctx context.Context, key string, body []byte, _ string) (string, bool, error) {
	if err := CheckKey(key); err != nil {
		return "", false, err
	}
	if err := ctx.Err(); err != nil {
		return "", false, fmt.Errorf("objstore: write %s: %w", key, err)
	}
	if err := makeBase(d.Path); err != nil {
		return "", false, fmt.Errorf("objstore: %w", err)
	}
	root, err := os.OpenRoot(d.Path)
	if err != nil {
		return "", false, err
	}
	defer root.Close()
	ref := (&url.URL{Scheme: "file", Path: filepath.Join(d.Path, filepath.FromSlash(key))}).String()
	dir := path.Dir(key)
	same, err := holds(root, key, body)
	if err != nil {
		return "", false, fmt.Errorf("objstore: read %s: %w", key, err)
	}
	if same {
		if err := syncDirs(root, dir); err != nil {
			return "", false, fmt.Errorf("objstore: %s: %w", key, err)
		}
		return ref, false, nil
	}
	if err := root.MkdirAll(dir, 0o750); err != nil {
		return "", false, fmt.Errorf("objstore: %w", err)
	}
	sweepTmp(root, dir, time.Now().Add(-TmpMaxAge))
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := dir + "/" + tmpPrefix + hex.EncodeToString(rnd[:])
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return "", false, fmt.Errorf("objstore: %w", err)
	}
	_, err = f.Write(body)
	if err == nil {
		err = syncFile(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = ctx.Err() // the sync may have outlasted the lease
	}
	if err == nil {
		err = root.Rename(tmp, key)
	}
	if err != nil {
		_ = root.Remove(tmp)
		return "", false, fmt.Errorf("objstore: write %s: %w", key, err)
	}
	if err := syncDirs(root, dir); err != nil {
		return "", false, fmt.Errorf("objstore: write %s: %w", key, err)
	}
	return ref, true, nil
}

// holds reports whether the file at key holds exactly body, and then syncs
// it: an earlier Put may have renamed it into place and failed before it
// was durable.
func holds(root *os.Root, key string, body []byte) (bool, error) {
	f, err := root.Open(key)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	old, err := io.ReadAll(io.LimitReader(f, int64(len(body))+1))
	if err != nil || !bytes.Equal(old, body) {
		return false, err
	}
	return true, syncFile(f)
}

// syncDirs syncs dir and each directory above it up to the root: the one
// holding the renamed file, and those holding directories MkdirAll may
// have made for it.
func syncDirs(root *os.Root, dir string) error {
	for p := dir; ; p = path.Dir(p) {
		f, err := root.Open(p)
		if err == nil {
			err = syncFile(f)
			_ = f.Close()
		}
		if err != nil {
			return fmt.Errorf("sync directory %s: %w", p, err)
		}
		if p == "." {
			return nil
		}
	}
}

// makeBase makes the store's directory when it is missing and syncs the
// parent of each directory it made, so the tree below survives a power
// cut.
func makeBase(p string) error {
	p = filepath.Clean(p)
	var made []string
	for q := p; ; q = filepath.Dir(q) {
		_, err := os.Stat(q)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		made = append(made, q)
		if filepath.Dir(q) == q {
			break
		}
	}
	if len(made) == 0 {
		return nil
	}
	if err := os.MkdirAll(p, 0o750); err != nil {
		return err
	}
	for _, q := range made {
		f, err := os.Open(filepath.Dir(q))
		if err == nil {
			err = syncFile(f)
			_ = f.Close()
		}
		if err != nil {
			return fmt.Errorf("sync directory %s: %w", filepath.Dir(q), err)
		}
	}
	return nil
}

// sweepTmp removes the temporary files in dir last modified before
// before. It is best effort: a file it cannot remove costs only space, and
// must not fail the report being written.
func sweepTmp(root *os.Root, dir string, before time.Time) {
	f, err := root.Open(dir)
	if err != nil {
		return
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), tmpPrefix) || !e.Type().IsRegular() {
			continue
		}
		if info, err := e.Info(); err == nil && info.ModTime().Before(before) {
			_ = root.Remove(path.Join(dir, e.Name()))
		}
	}
}
