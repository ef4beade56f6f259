package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/minio/minio-go/v7"
)

// Reader reads back an object by the ref Put returned.
type Reader interface {
	Get(ctx context.Context, ref string) ([]byte, error)
}

// MaxGet bounds what Get reads: reports are small, and a page never holds
// more.
const MaxGet = 8 << 20

// ErrForeignRef is returned for a ref that does not name an object of this
// store (another directory, bucket or prefix, or a path that climbs out).
var ErrForeignRef = errors.New("objstore: ref is not in this store")

// ErrTooLarge is returned for an object larger than MaxGet.
var ErrTooLarge = errors.New("objstore: object too large to read")

// key returns the store-relative key of ref, checked like a Put key.
func (d Dir) key(ref string) (string, error) {
	u, err := url.Parse(ref)
	if err != nil || u.Scheme != "file" {
		return "", ErrForeignRef
	}
	base, err := filepath.Abs(d.Path)
	if err != nil {
		return "", err
	}
	target, err := filepath.Abs(u.Path)
	if err != nil {
		return "", ErrForeignRef
	}
	rel, err := filepath.Rel(base, target)
	if err != nil {
		return "", ErrForeignRef
	}
	key := filepath.ToSlash(rel)
	if CheckKey(key) != nil {
		return "", ErrForeignRef
	}
	return key, nil
}

// Get reads ref through an os.Root at d.Path, so no ref reaches a file
// outside it (a symlink out included).
func (d Dir) Get(_ context.Context, ref string) ([]byte, error) {
	key, err := d.key(ref)
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(d.Path)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(filepath.FromSlash(key))
	if err != nil {
		return nil, fmt.Errorf("objstore: get: %w", err)
	}
	defer f.Close()
	return readCapped(f)
}

// Get reads an s3:// ref inside the store's bucket and prefix.
func (s *S3) Get(ctx context.Context, ref string) ([]byte, error) {
	base := "s3://" + s.Bucket + "/"
	if s.Prefix != "" {
		base += s.Prefix + "/"
	}
	key, ok := strings.CutPrefix(ref, base)
	if !ok || CheckKey(key) != nil {
		return nil, ErrForeignRef
	}
	full := key
	if s.Prefix != "" {
		full = s.Prefix + "/" + key
	}
	o, err := s.client.GetObject(ctx, s.Bucket, full, minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("objstore: get %s: %w", ref, err)
	}
	defer o.Close()
	b, err := readCapped(o)
	if err != nil {
		return nil, fmt.Errorf("objstore: get %s: %w", ref, err)
	}
	return b, nil
}

func readCapped(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxGet+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxGet {
		return nil, ErrTooLarge
	}
	return b, nil
}
