package testsvc

import (
	"context"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Bucket is a fresh bucket on the real S3-compatible test server.
type S3Bucket struct {
	Endpoint  string // http://host:port
	Region    string
	AccessKey string
	SecretKey string
	Name      string
	Client    *minio.Client // authenticated with the keys above
}

// S3Endpoint is the S3 server tests use: EUTERPE_TEST_S3_ENDPOINT, this
// clone's private versitygw from scripts/services.sh unless the user named
// another; "" when unset.
func S3Endpoint() (endpoint, accessKey, secretKey string) {
	endpoint = os.Getenv("EUTERPE_TEST_S3_ENDPOINT")
	accessKey = os.Getenv("EUTERPE_TEST_S3_ACCESS_KEY")
	if accessKey == "" {
		accessKey = "euterpe-root"
	}
	secretKey = os.Getenv("EUTERPE_TEST_S3_SECRET_KEY")
	if secretKey == "" {
		secretKey = "euterpe-root-secret"
	}
	return endpoint, accessKey, secretKey
}

// S3 creates an empty bucket for the test on the real S3-compatible server
// and removes it, with its objects, when the test ends. An unreachable
// server skips the test, or fails it when CI=true.
func S3(t testing.TB) S3Bucket {
	t.Helper()
	ep, ak, sk := S3Endpoint()
	if ep == "" {
		Unavailable(t, "s3 (EUTERPE_TEST_S3_ENDPOINT unset)", errNotConfigured)
	}
	u, err := url.Parse(ep)
	if err != nil || u.Host == "" {
		t.Fatalf("EUTERPE_TEST_S3_ENDPOINT %q: not a URL", ep)
	}
	c, err := minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(ak, sk, ""),
		Secure:       u.Scheme == "https",
		Region:       "us-east-1",
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   1,
	})
	if err != nil {
		t.Fatalf("s3 client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.ListBuckets(ctx); err != nil {
		Unavailable(t, "s3 at "+ep, err)
	}
	name := "euterpe-t-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:20]
	if err := c.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for obj := range c.ListObjects(ctx, name, minio.ListObjectsOptions{Recursive: true}) {
			if obj.Err == nil {
				_ = c.RemoveObject(ctx, name, obj.Key, minio.RemoveObjectOptions{})
			}
		}
		_ = c.RemoveBucket(ctx, name)
	})
	return S3Bucket{Endpoint: ep, Region: "us-east-1", AccessKey: ak, SecretKey: sk, Name: name, Client: c}
}
