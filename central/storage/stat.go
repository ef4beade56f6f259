package storage

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
)

// ObjectInfo is what Stat reports of an object.
type ObjectInfo struct {
	Size int64
	ETag string
	// LastModified is the server's time of the write that made the object
	// (a copy's included), to the second as HTTP carries it.
	LastModified time.Time
	// Metadata is the object's user metadata (x-amz-meta-*), names in lower
	// case without the prefix, as HTTP header names are case-insensitive.
	// Unlike the ETag, which S3 computes anew for a multipart copy (and
	// which is per object under SSE-KMS), it is carried over by a copy.
	Metadata map[string]string
}

// Stat reads bucket/key's size, ETag, Last-Modified and user metadata with
// one HEAD request. A key that does not exist is an *Error with Status 404
// (see NotFound).
func (c *Client) Stat(ctx context.Context, b Bucket, key string, creds Credentials) (ObjectInfo, error) {
	target := b.Name + "/" + key
	if err := CheckKey(key); err != nil {
		return ObjectInfo{}, newError(ctx, "stat", target, 0, "", err)
	}
	cl, err := c.s3(b, creds)
	if err != nil {
		return ObjectInfo{}, newError(ctx, "stat", target, 0, "", err)
	}
	st, err := cl.StatObject(ctx, b.Name, key, minio.StatObjectOptions{})
	if err != nil {
		return ObjectInfo{}, s3Error(ctx, "stat", target, err, creds)
	}
	meta := make(map[string]string, len(st.UserMetadata))
	for k, v := range st.UserMetadata {
		meta[strings.ToLower(k)] = v
	}
	return ObjectInfo{Size: st.Size, ETag: st.ETag, LastModified: st.LastModified, Metadata: meta}, nil
}

// NotFound reports whether err is a storage answer that the object does
// not exist.
func NotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}
