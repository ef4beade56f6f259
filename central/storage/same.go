package storage

import (
	"net"
	"net/url"
	"strings"

	"github.com/minio/minio-go/v7/pkg/s3utils"
)

// SameBucket reports whether a and b address one bucket: the same name on
// the same server as requests are sent to it. The server is the endpoint's
// host and port (empty is AWS S3): scheme and host letter case make no
// difference, nor does a default port written out (minio-go drops :80 and
// :443 and host names are case-insensitive). Every AWS S3 endpoint of one
// partition is one server here: bucket names are unique across it and
// minio-go sends each request to the bucket's own region whichever
// endpoint was named. Two names for one server (an address and a host
// name, DNS aliases, a proxy) are not detected: nothing here can tell.
func SameBucket(a, b Bucket) bool {
	if a.Name != b.Name {
		return false
	}
	sa, oka := server(a.Endpoint)
	sb, okb := server(b.Endpoint)
	if !oka || !okb {
		return a.Endpoint == b.Endpoint
	}
	return sa == sb
}

// URLKey returns the key of bucket b the URL raw names when fetched with a
// plain GET: path style (<endpoint>/<bucket>/<key>) or virtual-hosted
// style (<bucket>.<endpoint host>/<key>) on b's server as SameBucket sees
// it; false when it names neither. A URL on any other host (a CDN, a
// custom domain, a server that redirects) may still serve an object of b:
// that cannot be told from the URL.
func URLKey(raw string, b Bucket) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", false
	}
	path := strings.TrimPrefix(u.Path, "/")
	if bucket, key, ok := strings.Cut(path, "/"); ok &&
		SameBucket(Bucket{Endpoint: u.Scheme + "://" + u.Host, Name: bucket}, b) {
		return key, true
	}
	rest, ok := strings.CutPrefix(strings.ToLower(u.Host), strings.ToLower(b.Name)+".")
	if ok && SameBucket(Bucket{Endpoint: u.Scheme + "://" + rest, Name: b.Name}, b) {
		return path, true
	}
	return "", false
}

// server is the identity of the server an endpoint addresses: host:port,
// or the AWS partition for an AWS S3 endpoint. false for an endpoint this
// package refuses to use.
func server(ep string) (string, bool) {
	if ep == "" {
		ep = "https://s3.amazonaws.com"
	}
	u, err := parseEndpoint(ep)
	if err != nil {
		return "", false
	}
	host := strings.ToLower(u.Hostname())
	if s3utils.IsAmazonEndpoint(url.URL{Scheme: u.Scheme, Host: host}) {
		if strings.HasSuffix(host, ".amazonaws.com.cn") {
			return "aws-cn", true
		}
		return "aws", true
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return net.JoinHostPort(host, port), true
}

// SourceIn returns the key of a job's source object when it lies in the
// bucket out: a signed URL (url) that URLKey reads as one of out's
// objects, or key of the bucket src when src is out.
func SourceIn(url string, src Bucket, key string, out Bucket) (string, bool) {
	if url != "" {
		return URLKey(url, out)
	}
	if SameBucket(src, out) {
		return key, true
	}
	return "", false
}
