package objstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Store writes objects.
type Store interface {
	// Put writes body at key unless identical bytes are already there;
	// written reports whether it wrote. ref names the object
	// (file:///… or s3://bucket/…).
	Put(ctx context.Context, key string, body []byte, contentType string) (ref string, written bool, err error)
}

var component = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// ErrBadKey is returned for a key with an empty, dot-leading or otherwise
// unsafe path component.
var ErrBadKey = errors.New("objstore: unsafe object key")

// CheckKey accepts slash-separated components of letters, digits, '.',
// '_' and '-', none starting with '.', so a key is the same relative path
// on every store and never climbs out of its prefix.
func CheckKey(key string) error {
	for _, c := range strings.Split(key, "/") {
		if !component.MatchString(c) {
			return fmt.Errorf("%w: %q", ErrBadKey, key)
		}
	}
	return nil
}

// Credentials are S3 keys; they never print.
type Credentials struct {
	AccessKeyID, SecretAccessKey string
}

func (Credentials) String() string   { return "[REDACTED]" }
func (Credentials) GoString() string { return "[REDACTED]" }

// S3 is an S3 bucket store.
type S3 struct {
	Bucket, Prefix string
	client         *minio.Client
}

// ShaMeta is the user metadata key holding the SHA-256 of the object's
// bytes, compared before a write.
const ShaMeta = "Euterpe-Sha256"

// ParseS3URL reads s3://bucket[/prefix][?endpoint=URL&region=R].
func ParseS3URL(raw string) (bucket, prefix, endpoint, region string, err error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "s3" || u.Host == "" {
		return "", "", "", "", errors.New("want s3://bucket[/prefix][?endpoint=https://host&region=r]")
	}
	prefix = strings.Trim(u.Path, "/")
	if prefix != "" {
		if err := CheckKey(prefix); err != nil {
			return "", "", "", "", err
		}
	}
	endpoint = u.Query().Get("endpoint")
	if endpoint == "" {
		endpoint = "https://s3.amazonaws.com"
	}
	region = u.Query().Get("region")
	if region == "" {
		region = "us-east-1"
	}
	return u.Host, prefix, endpoint, region, nil
}

// NewS3 opens the bucket store named by an s3:// URL with creds.
func NewS3(raw string, creds Credentials) (*S3, error) {
	bucket, prefix, endpoint, region, err := ParseS3URL(raw)
	if err != nil {
		return nil, err
	}
	eu, err := url.Parse(endpoint)
	if err != nil || eu.Host == "" || (eu.Scheme != "http" && eu.Scheme != "https") {
		return nil, errors.New("s3 endpoint must be an http(s) URL")
	}
	c, err := minio.New(eu.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(creds.AccessKeyID, creds.SecretAccessKey, ""),
		Secure:       eu.Scheme == "https",
		Region:       region,
		BucketLookup: minio.BucketLookupPath,
	})
	if err != nil {
		return nil, err
	}
	return &S3{Bucket: bucket, Prefix: prefix, client: c}, nil
}

// Put stats the object first and skips the write when its recorded
// SHA-256 matches body's. The stat only saves a write: when it cannot tell
// (no object, or no right to look), the object is written.
func (s *S3) Put(ctx context.Context, key string, body []byte, contentType string) (string, bool, error) {
	if err := CheckKey(key); err != nil {
		return "", false, err
	}
	full := key
	if s.Prefix != "" {
		full = s.Prefix + "/" + key
	}
	ref := "s3://" + s.Bucket + "/" + full
	sum := sha256.Sum256(body)
	want := hex.EncodeToString(sum[:])
	info, err := s.client.StatObject(ctx, s.Bucket, full, minio.StatObjectOptions{})
	if err == nil {
		for k, v := range info.UserMetadata {
			if strings.EqualFold(k, ShaMeta) && v == want && info.Size == int64(len(body)) {
				return ref, false, nil
			}
		}
	} else if !statUnknown(err) {
		return "", false, fmt.Errorf("objstore: stat %s: %w", ref, err)
	}
	_, err = s.client.PutObject(ctx, s.Bucket, full, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{
		ContentType: contentType, UserMetadata: map[string]string{ShaMeta: want},
	})
	if err != nil {
		return "", false, fmt.Errorf("objstore: put %s: %w", ref, err)
	}
	return ref, true, nil
}

// statUnknown reports whether a failed stat leaves the write to be done:
// the object is missing, or the credentials may not look. S3 answers a
// HEAD of a missing key 403, not 404, to credentials without s3:ListBucket
// — a sink policy of PutObject (and GetObject) on the prefix alone — and a
// HEAD has no body to tell that from other refusals. Anything else (5xx, a
// network failure) fails the Put, to be retried.
func statUnknown(err error) bool {
	r := minio.ToErrorResponse(err)
	switch {
	case r.Code == "NoSuchKey", r.StatusCode == http.StatusNotFound:
		return true
	case r.Code == "AccessDenied", r.StatusCode == http.StatusForbidden:
		return true
	}
	return false
}
