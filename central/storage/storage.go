package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Credentials are scoped, short-lived S3 keys. String and LogValue hide them
// so a careless format verb or log call prints nothing secret.
type Credentials struct {
	AccessKeyID     string `json:"access_key_id"`
	SecretAccessKey string `json:"secret_access_key"`
	SessionToken    string `json:"session_token,omitempty"`
}

func (Credentials) String() string   { return "[REDACTED]" }
func (Credentials) GoString() string { return "[REDACTED]" }

// Bucket locates an S3-compatible bucket. Endpoint is a URL such as
// https://s3.eu-west-1.amazonaws.com or http://127.0.0.1:7070; empty means
// AWS S3.
type Bucket struct {
	Endpoint string
	Region   string
	Name     string
}

// Source is where a job's input is: a signed URL, or an object.
type Source struct {
	URL    string // when set, fetched with a plain GET; Bucket and Key are ignored
	Bucket Bucket
	Key    string
}

// Client fetches and uploads. One Client is shared by all jobs of a runner;
// it keeps connections, never credentials.
type Client struct {
	http *http.Client // for signed URLs
	tr   http.RoundTripper
	// PartSize is the multipart part size for uploads (default 16 MiB).
	PartSize uint64
	// CopyPartSize is the largest source Copy sends as one CopyObject
	// request, and the part size of a multipart copy of a larger one
	// (default and S3's maximum 5 GiB, at least S3's minimum 5 MiB).
	CopyPartSize int64
}

// Options tune a Client.
type Options struct {
	// HeaderTimeout bounds how long a server may take to start answering
	// (0 means 30 s); a body may take as long as it keeps streaming.
	HeaderTimeout time.Duration
	// DialContext, when set, makes every connection: central/ssrf's
	// Policy.DialContext keeps requester-supplied endpoints and signed URLs
	// away from the cluster's inside, and reports a refusal only when no
	// allowed address of a name is left (a net.Dialer with a Control would
	// report the first refused address of a mixed DNS answer, a final
	// failure, while an allowed one was merely down). nil dials anything.
	DialContext func(ctx context.Context, network, address string) (net.Conn, error)
}

// NewClient returns a Client.
func NewClient(o Options) *Client {
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = 30 * time.Second
	}
	if o.DialContext == nil {
		o.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	tr := &http.Transport{
		// No proxy from the environment: it would hide the real
		// destination from the dialer's policy.
		Proxy:                 nil,
		DialContext:           o.DialContext,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: o.HeaderTimeout,
		ExpectContinueTimeout: time.Second,
		// Audio rarely compresses and a transparent gzip would hide the
		// real Content-Length from the size check.
		DisableCompression: true,
	}
	return &Client{
		http: &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a redirect could point anywhere; 3xx is an error
		}},
		tr: tr, PartSize: 16 << 20, CopyPartSize: maxCopyPart,
	}
}

// s3 builds a minio client for one call. minio's own retries are off: the
// runner owns retry policy, with backoff, counters and the lease.
func (c *Client) s3(b Bucket, creds Credentials) (*minio.Client, error) {
	ep := b.Endpoint
	if ep == "" {
		ep = "https://s3.amazonaws.com"
	}
	u, err := parseEndpoint(ep)
	if err != nil {
		return nil, err
	}
	return minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken),
		Secure:       u.Scheme == "https",
		Region:       b.Region,
		Transport:    c.tr,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   1,
	})
}

// FetchOption adjusts one Fetch.
type FetchOption func(*fetchOptions)

type fetchOptions struct{ deadline time.Time }

// FetchDeadline bounds the whole fetch, body included, by t: a server that
// answers in time and then trickles the body a byte at a time is otherwise
// bounded only by the size limit. Unlike a deadline on the ctx given to
// Fetch (the caller giving up: final), running out of this one while ctx
// is still live is the storage's fault: a retryable storage_timeout
// (contract §5).
func FetchDeadline(t time.Time) FetchOption {
	return func(o *fetchOptions) { o.deadline = t }
}

// Fetch streams the source into w and returns the number of bytes written.
// The declared size (Content-Length of the GET, or the object's size from a
// HEAD) is checked against limit before any of the body is read; the stream
// is cut at limit+1 bytes whatever was declared. limit <= 0 means no limit.
// A storage failure is an *Error; a failure to write to w is w's own error
// (wrapped), which no storage retry rule describes.
func (c *Client) Fetch(ctx context.Context, src Source, creds Credentials, w io.Writer, limit int64, opts ...FetchOption) (int64, error) {
	var o fetchOptions
	for _, opt := range opts {
		opt(&o)
	}
	fctx, cancel := ctx, context.CancelFunc(func() {})
	if !o.deadline.IsZero() {
		fctx, cancel = context.WithDeadline(ctx, o.deadline)
	}
	defer cancel()
	var n int64
	var err error
	if src.URL != "" {
		n, err = c.fetchURL(fctx, src.URL, w, limit)
	} else {
		n, err = c.fetchObject(fctx, src, creds, w, limit)
	}
	if err != nil && fctx.Err() != nil && ctx.Err() == nil {
		// Classified against fctx, which looked like the caller's end.
		ranOut(err)
	}
	return n, err
}

// ranOut makes err, a request cut by the call's own deadline while the
// caller's context is live, the retryable storage_timeout it is.
func ranOut(err error) {
	var se *Error
	if errors.As(err, &se) && se.Status == 0 {
		se.class, se.timeout = Retryable, true
		se.Err = fmt.Errorf("not complete within its deadline: %w", context.DeadlineExceeded)
	}
}

func (c *Client) fetchURL(ctx context.Context, raw string, w io.Writer, limit int64) (int64, error) {
	target := redactURL(raw)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, raw, nil)
	if err != nil {
		return 0, newError(ctx, "fetch", target, 0, "", errors.New("invalid source URL"))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, newError(ctx, "fetch", target, 0, "", scrubURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return 0, newError(ctx, "fetch", target, resp.StatusCode, "", errors.New(http.StatusText(resp.StatusCode)))
	}
	if limit > 0 && resp.ContentLength > limit {
		return 0, newError(ctx, "fetch", target, 0, "", tooLarge(resp.ContentLength, limit))
	}
	return copyLimited(ctx, "fetch", target, w, resp.Body, limit, Credentials{})
}

func (c *Client) fetchObject(ctx context.Context, src Source, creds Credentials, w io.Writer, limit int64) (int64, error) {
	target := src.Bucket.Name + "/" + src.Key
	cl, err := c.s3(src.Bucket, creds)
	if err != nil {
		return 0, newError(ctx, "fetch", target, 0, "", err)
	}
	st, err := cl.StatObject(ctx, src.Bucket.Name, src.Key, minio.StatObjectOptions{})
	if err != nil {
		return 0, s3Error(ctx, "fetch", target, err, creds)
	}
	if limit > 0 && st.Size > limit {
		return 0, newError(ctx, "fetch", target, 0, "", tooLarge(st.Size, limit))
	}
	opts := minio.GetObjectOptions{}
	if st.ETag != "" {
		_ = opts.SetMatchETag(st.ETag) // the object must not change under us
	}
	obj, err := cl.GetObject(ctx, src.Bucket.Name, src.Key, opts)
	if err != nil {
		return 0, s3Error(ctx, "fetch", target, err, creds)
	}
	defer obj.Close()
	return copyLimited(ctx, "fetch", target, w, obj, limit, creds)
}

// copyLimited copies r to w, failing once more than limit bytes arrive. A
// failure to write to w (the runner's disk full) is w's error, wrapped, not
// an *Error: the storage is not at fault and its retry table does not apply.
// creds are those the reads were signed with (none for a signed URL).
func copyLimited(ctx context.Context, op, target string, w io.Writer, r io.Reader, limit int64, creds Credentials) (int64, error) {
	src := r
	if limit > 0 {
		src = io.LimitReader(r, limit+1)
	}
	sink := &sinkWriter{w: w}
	n, err := io.CopyBuffer(sink, src, make([]byte, 256<<10))
	if err != nil {
		if sink.err != nil {
			return n, fmt.Errorf("%s %s: %w", op, target, sink.err)
		}
		if ctx.Err() != nil {
			return n, newError(ctx, op, target, 0, "", ctx.Err())
		}
		if me, ok := err.(minio.ErrorResponse); ok && me.StatusCode != 0 {
			return n, s3Error(ctx, op, target, me, creds)
		}
		return n, newError(ctx, op, target, 0, "", scrubURLError(err))
	}
	if limit > 0 && n > limit {
		return n, newError(ctx, op, target, 0, "", tooLarge(n, limit))
	}
	return n, nil
}

// sinkWriter remembers the error its writer returned, so that a failed
// copy can tell a local write failure from a failed read of the body.
type sinkWriter struct {
	w   io.Writer
	err error
}

func (s *sinkWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil {
		s.err = err
	}
	return n, err
}

func tooLarge(size, limit int64) error {
	if size <= limit {
		return ErrTooLarge
	}
	return fmt.Errorf("%w: %d bytes > limit %d", ErrTooLarge, size, limit)
}

// UploadOption adjusts one Upload.
type UploadOption func(*uploadOptions)

type uploadOptions struct {
	put      minio.PutObjectOptions
	deadline time.Time
}

// UploadDeadline bounds the upload by t. Unlike a deadline on the ctx given
// to Upload (the caller giving up: final), running out of this one while
// ctx is still live is the storage's fault: a retryable storage_timeout
// (contract §5), after which the incomplete multipart uploads at the key
// are aborted, as for a Copy past its CopyDeadline.
func UploadDeadline(t time.Time) UploadOption {
	return func(o *uploadOptions) { o.deadline = t }
}

// OnProgress makes Upload call fn with the number of bytes of the file read
// for sending, each time a chunk is read (fn must be cheap and safe for
// concurrent use: parts are sent two at a time). A part sent again after a
// failure counts again.
func OnProgress(fn func(n int)) UploadOption {
	return func(o *uploadOptions) { o.put.Progress = progressHook(fn) }
}

// progressHook is the io.Reader minio reads as many bytes from as it read
// from the file.
type progressHook func(n int)

func (h progressHook) Read(p []byte) (int, error) {
	h(len(p))
	return len(p), nil
}

// UploadMetadata gives the object the user metadata m (sent as
// x-amz-meta-<name> headers; names and values must be valid in a header).
// Copy carries it over to the copy.
func UploadMetadata(m map[string]string) UploadOption {
	return func(o *uploadOptions) { o.put.UserMetadata = m }
}

// Upload stores the local file at path as bucket/key with contentType. The
// size is known from the file, so minio streams parts straight from it
// (io.ReaderAt) instead of buffering them.
//
// A multipart upload that fails once minio-go has its upload ID is aborted
// by minio-go itself, detached from ctx (v7.4.1, abortFailedUpload), so one
// cut by ctx's end does not stay behind. One whose initiation reached the
// server while its answer was lost has no ID to abort: when the upload runs
// out of its UploadDeadline while ctx is live, the incomplete multipart
// uploads at the key are aborted, best effort, within ctx (never after the
// caller's own end, when the key may belong to a later lease owner; the
// bucket's lifecycle rule is left those).
func (c *Client) Upload(ctx context.Context, b Bucket, key, path, contentType string, creds Credentials, opts ...UploadOption) (int64, error) {
	target := b.Name + "/" + key
	if err := CheckKey(key); err != nil {
		return 0, newError(ctx, "upload", target, 0, "", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("upload %s: %w", target, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("upload %s: %w", target, err)
	}
	cl, err := c.s3(b, creds)
	if err != nil {
		return 0, newError(ctx, "upload", target, 0, "", err)
	}
	o := uploadOptions{put: minio.PutObjectOptions{
		ContentType: contentType,
		PartSize:    c.PartSize,
		NumThreads:  2,
	}}
	for _, opt := range opts {
		opt(&o)
	}
	uctx, cancel := ctx, context.CancelFunc(func() {})
	if !o.deadline.IsZero() {
		uctx, cancel = context.WithDeadline(ctx, o.deadline)
	}
	_, err = cl.PutObject(uctx, b.Name, key, f, fi.Size(), o.put)
	expired := uctx.Err() != nil && ctx.Err() == nil
	cancel()
	if err != nil {
		// Classified against ctx, not uctx: only the caller's end is final.
		se := s3Error(ctx, "upload", target, err, creds)
		if expired {
			ranOut(se)
			abortIncomplete(ctx, cl, b.Name, key)
		}
		return 0, se
	}
	return fi.Size(), nil
}

// CopyOption adjusts one Copy.
type CopyOption func(*copyOptions)

type copyOptions struct{ deadline time.Time }

// CopyDeadline bounds the copy by t. Unlike a deadline on the ctx given to
// Copy (the caller giving up: final), running out of this one while ctx is
// still live is the storage's fault, a copy that took too long: a
// retryable storage_timeout (contract §5).
func CopyDeadline(t time.Time) CopyOption {
	return func(o *copyOptions) { o.deadline = t }
}

// abortTimeout bounds the clean-up of a failed copy or upload.
const abortTimeout = 10 * time.Second

// Copy sizes S3 sets: one CopyObject request (and one part of a multipart
// copy) copies at most 5 GiB; every part but the last is at least 5 MiB.
const (
	maxCopyPart = 5 << 30
	minCopyPart = 5 << 20
)

// Copy copies bucket/src to bucket/dst on the server (no bytes pass through
// this process): a single CopyObject request for a source up to
// CopyPartSize (5 GiB by default), a multipart copy in parts of that size
// above it. The destination gets the source's Content-Type and metadata.
//
// Every request of the copy (the source's stat included) runs under ctx
// bounded by the CopyDeadline, so none outlives either: the copy is built
// from minio-go's CopyObject and Core calls rather than its ComposeObject,
// which (v7.4.1, api-compose-object.go) stats its sources with
// context.Background(), bounded only by the transport's response-header
// timeout, and aborts a failed multipart copy detached from ctx for up to
// a minute.
//
// A multipart copy whose part copy or completion fails is aborted here
// while ctx and its deadline are live, but not one whose initiation or
// completion request was cut (the upload ID may be lost with the request):
// when the copy runs out of its CopyDeadline while ctx is live, the
// incomplete multipart uploads at dst are aborted, best effort, within ctx
// (so never after the caller's own end, when the key may belong to a later
// lease owner).
func (c *Client) Copy(ctx context.Context, b Bucket, src, dst string, creds Credentials, opts ...CopyOption) error {
	var o copyOptions
	for _, opt := range opts {
		opt(&o)
	}
	target := b.Name + "/" + dst
	for _, k := range []string{src, dst} {
		if err := CheckKey(k); err != nil {
			return newError(ctx, "copy", target, 0, "", err)
		}
	}
	cl, err := c.s3(b, creds)
	if err != nil {
		return newError(ctx, "copy", target, 0, "", err)
	}
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if !o.deadline.IsZero() {
		cctx, cancel = context.WithDeadline(ctx, o.deadline)
	}
	err = c.serverCopy(cctx, cl, b.Name, src, dst)
	expired := cctx.Err() != nil && ctx.Err() == nil
	cancel()
	if err != nil {
		// Classified against ctx, not cctx: the copy's own deadline is a
		// storage timeout, only the caller's end is final.
		se := s3Error(ctx, "copy", target, err, creds)
		if expired {
			abortIncomplete(ctx, cl, b.Name, dst)
		}
		return se
	}
	return nil
}

// copyPartSize is CopyPartSize within the sizes S3 accepts.
func (c *Client) copyPartSize() int64 {
	switch p := c.CopyPartSize; {
	case p <= 0 || p > maxCopyPart:
		return maxCopyPart
	case p < minCopyPart:
		return minCopyPart
	default:
		return p
	}
}

// serverCopy copies bucket/src to bucket/dst with every request under ctx.
func (c *Client) serverCopy(ctx context.Context, cl *minio.Client, bucket, src, dst string) error {
	st, err := cl.StatObject(ctx, bucket, src, minio.StatObjectOptions{})
	if err != nil {
		return err
	}
	part := c.copyPartSize()
	if st.Size <= part {
		// No metadata directive: the server copies the source's
		// Content-Type and metadata (COPY).
		_, err = cl.CopyObject(ctx, minio.CopyDestOptions{Bucket: bucket, Object: dst},
			minio.CopySrcOptions{Bucket: bucket, Object: src})
		return err
	}
	return copyParts(ctx, minio.Core{Client: cl}, bucket, src, dst, st, part)
}

// copyParts copies the object st describes from src to dst in parts of
// part bytes (the last one shorter), one part at a time.
func copyParts(ctx context.Context, core minio.Core, bucket, src, dst string, st minio.ObjectInfo, part int64) error {
	// A multipart upload starts with no metadata of its own: give it the
	// source's, as CopyObject's COPY directive does.
	id, err := core.NewMultipartUpload(ctx, bucket, dst, minio.PutObjectOptions{
		ContentType:        st.ContentType,
		ContentEncoding:    st.Metadata.Get("Content-Encoding"),
		ContentDisposition: st.Metadata.Get("Content-Disposition"),
		ContentLanguage:    st.Metadata.Get("Content-Language"),
		CacheControl:       st.Metadata.Get("Cache-Control"),
		UserMetadata:       st.UserMetadata,
	})
	if err != nil {
		return err
	}
	// Each part must come from the object that was stat'd: parts of two
	// versions of the source would make an object that is neither.
	var match map[string]string
	if st.ETag != "" {
		match = map[string]string{"x-amz-copy-source-if-match": `"` + st.ETag + `"`}
	}
	var parts []minio.CompletePart
	for off, n := int64(0), 1; off < st.Size; off, n = off+part, n+1 {
		p, err := core.CopyObjectPart(ctx, bucket, src, bucket, dst, id, n, off, min(part, st.Size-off), match)
		if err != nil {
			abortUpload(ctx, core, bucket, dst, id)
			return err
		}
		parts = append(parts, p)
	}
	if _, err := core.CompleteMultipartUpload(ctx, bucket, dst, id, parts, minio.PutObjectOptions{}); err != nil {
		abortUpload(ctx, core, bucket, dst, id)
		return err
	}
	return nil
}

// abortUpload aborts the multipart upload id at bucket/key, best effort,
// only while ctx is live: once the copy's deadline has passed Copy sweeps
// the key itself, and after the caller's end nothing is sent.
func abortUpload(ctx context.Context, core minio.Core, bucket, key, id string) {
	if ctx.Err() != nil {
		return
	}
	actx, cancel := context.WithTimeout(ctx, abortTimeout)
	defer cancel()
	_ = core.AbortMultipartUpload(actx, bucket, key, id)
}

// abortIncomplete aborts the incomplete multipart uploads at bucket/key,
// best effort: a failure leaves them to the bucket's lifecycle rule.
func abortIncomplete(ctx context.Context, cl *minio.Client, bucket, key string) {
	actx, cancel := context.WithTimeout(ctx, abortTimeout)
	defer cancel()
	_ = cl.RemoveIncompleteUpload(actx, bucket, key)
}

// Remove deletes bucket/key; a key that does not exist is not an error.
func (c *Client) Remove(ctx context.Context, b Bucket, key string, creds Credentials) error {
	target := b.Name + "/" + key
	if err := CheckKey(key); err != nil {
		return newError(ctx, "remove", target, 0, "", err)
	}
	cl, err := c.s3(b, creds)
	if err != nil {
		return newError(ctx, "remove", target, 0, "", err)
	}
	if err := cl.RemoveObject(ctx, b.Name, key, minio.RemoveObjectOptions{}); err != nil {
		return s3Error(ctx, "remove", target, err, creds)
	}
	return nil
}

// ErrInvalidEndpoint is matched with errors.Is when a bucket's endpoint is
// not of the form http(s)://host[:port].
var ErrInvalidEndpoint = errors.New("want http(s)://host[:port]")

// CheckEndpoint refuses a bucket endpoint other than http(s)://host[:port]
// with ErrInvalidEndpoint, as every request to it would be. The error
// names the endpoint without its userinfo, query or fragment.
func CheckEndpoint(ep string) error {
	_, err := parseEndpoint(ep)
	return err
}

// parseEndpoint: minio-go keeps only the host, so a path, query or userinfo
// would be dropped and the requests sent somewhere the endpoint does not
// name.
func parseEndpoint(ep string) (*url.URL, error) {
	u, err := url.Parse(ep)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("endpoint %q: %w", redactURL(ep), ErrInvalidEndpoint)
	}
	return u, nil
}

// ErrInvalidKey is matched with errors.Is when an object key has a "." or
// ".." segment.
var ErrInvalidKey = errors.New(`must not have a "." or ".." segment`)

// CheckKey refuses a key with "." or ".." segments: S3-compatible servers
// backed by a file system (versitygw, for one) resolve them as a path, so
// "out/j/../../x" is written at "x", outside the prefix the key names and
// the output credentials were scoped to.
func CheckKey(key string) error {
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("key %q: %w", key, ErrInvalidKey)
		}
	}
	return nil
}

// ObjectKey joins the output prefix and a file name with exactly one "/".
func ObjectKey(prefix, name string) string {
	prefix = strings.TrimRight(prefix, "/")
	if prefix == "" {
		return name
	}
	return prefix + "/" + name
}

// s3Error classifies a minio-go failure of a request signed with creds.
func s3Error(ctx context.Context, op, target string, err error, creds Credentials) *Error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return newError(ctx, op, target, 0, "", err)
	}
	resp := minio.ToErrorResponse(err)
	if resp.StatusCode == 0 {
		return newError(ctx, op, target, 0, "", scrubURLError(err))
	}
	msg := hideCredentials(resp.Message, creds)
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return newError(ctx, op, target, resp.StatusCode, resp.Code, errors.New(msg))
}

// redactURL drops the query (signatures) and userinfo from a URL.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// scrubURLError rewrites *url.Error so its URL carries no signature.
func scrubURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return &url.Error{Op: ue.Op, URL: redactURL(ue.URL), Err: ue.Err}
	}
	return err
}
