package api

import (
	"net/url"
	"strings"
)

// Which query parameters of a signed source URL are signature material,
// dropped from the idempotency hash so that a retry carrying a renewed
// signature is the same request; every other parameter names the object
// (a file id, a versionId, a response override) and is kept, so another
// object under the same Idempotency-Key is a 409. The choice errs towards
// keeping: a parameter dropped wrongly would replay the wrong job, one kept
// wrongly only makes a renewed retry a 409. Schemes are recognised by their
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

// hashableURL is raw as the idempotency hash sees it: userinfo and fragment
// removed, signature parameters dropped, the rest sorted by name.
func hashableURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	q := u.Query()
	v2 := false
	for k := range q {
		if strings.EqualFold(k, "signature") {
			v2 = true
		}
	}
	_, sas := q["sig"]
	for k := range q {
		lk := strings.ToLower(k)
		drop := false
		for _, p := range signedPrefixes {
			drop = drop || strings.HasPrefix(lk, p)
		}
		for _, p := range v2Params {
			drop = drop || (v2 && lk == p)
		}
		for _, p := range sasParams {
			drop = drop || (sas && k == p)
		}
		if drop {
			delete(q, k)
		}
	}
	u.User, u.Fragment, u.RawFragment, u.ForceQuery = nil, "", "", false
	u.RawQuery = q.Encode() // sorted by name: parameter order does not matter
	return u.String()
}
