package store

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrBadCursor is matched by the API to answer 400.
var ErrBadCursor = errors.New("bad cursor")

// ErrBadGroupKey is matched by the API to answer 400.
var ErrBadGroupKey = errors.New("bad group_key")

// DigestHexLen is the hex length of a content hash per algorithm (§6.2).
var DigestHexLen = map[string]int{AlgoBLAKE3: 64, AlgoSHA256: 64}

// GroupKey names a duplicate group: <hash_algorithm>:<content_hash_hex>.
type GroupKey struct {
	Algorithm string
	HashHex   string
}

func (k GroupKey) String() string { return k.Algorithm + ":" + k.HashHex }

// ParseGroupKey validates s as a group key: a known algorithm and a hex
// digest of that algorithm's length. Hex digits are normalised to lowercase.
func ParseGroupKey(s string) (GroupKey, error) {
	algo, hexs, ok := strings.Cut(s, ":")
	if !ok {
		return GroupKey{}, fmt.Errorf("%w: want <hash_algorithm>:<content_hash_hex>", ErrBadGroupKey)
	}
	if err := checkDigest(algo, hexs); err != nil {
		return GroupKey{}, err
	}
	return GroupKey{Algorithm: algo, HashHex: strings.ToLower(hexs)}, nil
}

func checkDigest(algo, hexs string) error {
	n, ok := DigestHexLen[algo]
	if !ok {
		return fmt.Errorf("%w: unknown hash_algorithm %q (want blake3 or sha256)", ErrBadGroupKey, capStr(algo))
	}
	if len(hexs) != n {
		return fmt.Errorf("%w: %s digest must be %d hex characters, got %d", ErrBadGroupKey, algo, n, len(hexs))
	}
	for i := 0; i < len(hexs); i++ {
		c := hexs[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return fmt.Errorf("%w: digest has a non-hex character at position %d", ErrBadGroupKey, i)
		}
	}
	return nil
}

func capStr(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

// GroupCursor is the §6.2 cursor payload: the previous page's tail group.
type GroupCursor struct {
	FileCount      int64  `json:"file_count"`
	TotalSizeBytes int64  `json:"total_size_bytes"`
	HashAlgorithm  string `json:"hash_algorithm"`
	ContentHashHex string `json:"content_hash_hex"`
}

// Encode renders the cursor as base64url JSON (no padding).
func (c GroupCursor) Encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeGroupCursor parses a cursor produced by Encode; anything else,
// including unknown or missing fields and impossible values, is ErrBadCursor.
func DecodeGroupCursor(s string) (GroupCursor, error) {
	var c GroupCursor
	if len(s) > 512 {
		return c, fmt.Errorf("%w: too long", ErrBadCursor)
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil {
		return c, fmt.Errorf("%w: not base64url", ErrBadCursor)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return c, fmt.Errorf("%w: not a JSON object", ErrBadCursor)
	}
	for _, f := range []string{"file_count", "total_size_bytes", "hash_algorithm", "content_hash_hex"} {
		if _, ok := fields[f]; !ok {
			return c, fmt.Errorf("%w: missing %s", ErrBadCursor, f)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("%w: %s", ErrBadCursor, "fields have the wrong type or are unknown")
	}
	if c.FileCount < 2 || c.TotalSizeBytes < 0 {
		return c, fmt.Errorf("%w: file_count must be at least 2 and total_size_bytes not negative", ErrBadCursor)
	}
	// Beyond sortKeyBase the sort key's numeric part turns negative and
	// sorts before every group: the listing would restart at page 1.
	if c.FileCount > sortKeyBase || c.TotalSizeBytes > sortKeyBase {
		return c, fmt.Errorf("%w: file_count and total_size_bytes must be at most %d", ErrBadCursor, int64(sortKeyBase))
	}
	if err := checkDigest(c.HashAlgorithm, c.ContentHashHex); err != nil {
		return c, fmt.Errorf("%w: %w", ErrBadCursor, err)
	}
	c.ContentHashHex = strings.ToLower(c.ContentHashHex)
	return c, nil
}

// sortKeyBase must equal the constant in sortKeySQL.
const sortKeyBase = 999999999999999999

// SortKey is the ascending string form of the §6.2 order, identical to the
// sort_key column the triggers maintain.
func SortKey(fileCount, totalSize int64, algo, hashHex string) string {
	return fmt.Sprintf("%019d%019d", sortKeyBase-fileCount, sortKeyBase-totalSize) + algo + ":" + hashHex
}

// DecodeIDCursor parses the id cursors of §6.1 and §6.3: a positive
// decimal integer (the previous page's tail id).
func DecodeIDCursor(s string) (int64, error) {
	if s == "" || len(s) > 19 {
		return 0, fmt.Errorf("%w: want a positive integer id", ErrBadCursor)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%w: want a positive integer id", ErrBadCursor)
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%w: want a positive integer id", ErrBadCursor)
	}
	return n, nil
}
