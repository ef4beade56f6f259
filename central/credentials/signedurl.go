package credentials

import (
	"net/url"
	"slices"
	"strings"
)

// Which query parameters of a signed source URL are signature material:
// a retry of an enqueue, or a credential refresh, may renew them, and they
// are dropped from ObjectURL; every other parameter names the object (a
// file id, a versionId, a response override) and is kept, so another object
// under the same Idempotency-Key is a 409 and a refresh to another object
// is refused. The choice errs towards keeping: a parameter dropped wrongly
// would replay the wrong job or let a refresh switch the job's source, one
// kept wrongly only makes a renewed retry a 409 or a refresh a 400. Schemes are recognised by their
// signature parameter, so a short name such as "sp" or "expires" is only
// dropped next to the signature that gives it that meaning.
var (
	// signedPrefixes: every parameter of AWS SigV4 (S3, R2, MinIO, …) and
	// GCS V4 presigned URLs is authentication (case-insensitive).
	signedPrefixes = []string{"x-amz-", "x-goog-"}
	// v2Params go with a "Signature" parameter (any case): S3 SigV2, GCS V2,
	// CloudFront signed URLs, and the common expires+signature form.
	v2Params = []string{"signature", "expires", "awsaccesskeyid", "googleaccessid", "key-pair-id", "policy"}
	// sasParams go with an Azure Storage SAS "sig" parameter (names are
	// case-sensitive lower case there); "sig" alone is also a common
	// generic signature name.
	sasParams = []string{"sig", "sv", "ss", "srt", "sp", "se", "st", "spr", "si", "sip", "sr", "sdd",
		"skoid", "sktid", "skt", "ske", "sks", "skv", "saoid", "suoid", "scid", "ses"}
)

// ObjectURL is raw as far as it names an object: userinfo and fragment
// removed, signature parameters dropped, the rest sorted. Two signed URLs
// with the same ObjectURL are one object under renewed signatures: it is
// what the idempotency hash covers of a URL source, and what a refreshed
// URL must keep of the job's. A URL that does not parse gives "".
//
// The query is split by hand rather than by url.ParseQuery, which silently
// skips a pair holding a ';' or a bad %-escape: such a pair still names the
// object, and dropping it would let another object replay this one's job.
func ObjectURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	type param struct{ name, pair string }
	var params []param
	v2, sas := false, false
	for _, pair := range strings.Split(u.RawQuery, "&") {
		if pair == "" {
			continue
		}
		name, value, _ := strings.Cut(pair, "=")
		n, errN := url.QueryUnescape(name)
		v, errV := url.QueryUnescape(value)
		if errN == nil && errV == nil {
			// Well-formed: in one spelling, so a retry that escapes
			// differently is still the same request.
			name, pair = n, url.QueryEscape(n)+"="+url.QueryEscape(v)
		}
		v2 = v2 || strings.EqualFold(name, "signature")
		sas = sas || name == "sig"
		params = append(params, param{name, pair})
	}
	// By name, and stably: the values of a repeated name keep their order,
	// which a server reading only the first one depends on.
	slices.SortStableFunc(params, func(a, b param) int { return strings.Compare(a.name, b.name) })
	kept := make([]string, 0, len(params))
	for _, p := range params {
		lk := strings.ToLower(p.name)
		drop := false
		for _, pre := range signedPrefixes {
			drop = drop || strings.HasPrefix(lk, pre)
		}
		drop = drop || v2 && slices.Contains(v2Params, lk) || sas && slices.Contains(sasParams, p.name)
		if !drop {
			kept = append(kept, p.pair)
		}
	}
	u.User, u.Fragment, u.RawFragment, u.ForceQuery = nil, "", "", false
	u.RawQuery = strings.Join(kept, "&")
	return u.String()
}
