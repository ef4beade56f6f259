package daemon

import (
	"os"
	"path/filepath"
)

// PlaceFile writes data to a temporary file beside path, syncs it, and puts
// it in place with place (os.Rename to replace what is there, os.Link to
// refuse to), then syncs the directory: a crash or power cut leaves the old
// file or the new one, never one half written. The temporary file is
// removed whatever happens; place's error is returned as it is, so a
// caller of os.Link can match fs.ErrExist.
func PlaceFile(path string, data []byte, place func(tmp, path string) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = place(tmp.Name(), path)
	}
	if err != nil {
		return err
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}
