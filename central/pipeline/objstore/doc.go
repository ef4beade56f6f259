// Package objstore is where pipeline reports are written: a local
// directory (opened as an os.Root, so no key — and no symlink planted in the
// tree — can reach outside it) or an S3 bucket. Put is content-addressed
// idempotent: an object whose bytes are already at the key is not written
// again, so re-running a job over unchanged data leaves storage as it was.
package objstore
