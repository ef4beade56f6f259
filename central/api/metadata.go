package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

const (
	maxMetadata = 16 << 10
	// maxMetadataDepth bounds how deeply metadata nests (the metadata
	// object is level 1): encoding/json and Postgres's jsonb parser recurse
	// once per level wherever the job is read, and no requester needs more
	// to label a job.
	maxMetadataDepth = 32
)

// validMetadata checks a job's metadata: a JSON object of bounded size and
// depth whose numbers both engines store as sent. The depth is checked
// before anything decodes it.
func validMetadata(raw json.RawMessage) error {
	if len(raw) > maxMetadata {
		return &FieldError{"metadata", fmt.Sprintf("must be at most %d bytes", maxMetadata)}
	}
	if jsonDepth(raw) > maxMetadataDepth {
		return &FieldError{"metadata", fmt.Sprintf("must nest at most %d levels deep", maxMetadataDepth)}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return &FieldError{"metadata", "must be a JSON object"}
	}
	if _, ok := v.(map[string]any); !ok {
		return &FieldError{"metadata", "must be a JSON object"}
	}
	if !storableNumbers(v) {
		return &FieldError{"metadata", fmt.Sprintf("has a number out of range (at most %d digits after the decimal point, "+
			"an exponent within ±%d, and within a 64-bit float's range)", maxNumericScale, maxExponent)}
	}
	return nil
}

// Limits on metadata numbers. Metadata is stored as sent, and Postgres's
// jsonb keeps numbers as numeric, which holds at most 16383 digits after
// the decimal point (1e-16384 is refused), and older releases refuse
// an exponent beyond ±1000: past them the insert would fail with a 500
// where SQLite stores the job.
const (
	maxNumericScale = 16383
	maxExponent     = 1000
)

// storableNumbers reports whether every number in v, decoded with
// UseNumber and nested at most maxMetadataDepth deep, is within the
// limits above and finite as a float64 (what a reader of the status or a
// webhook decodes it to by default).
func storableNumbers(v any) bool {
	switch x := v.(type) {
	case json.Number:
		return storableNumber(string(x))
	case []any:
		for _, e := range x {
			if !storableNumbers(e) {
				return false
			}
		}
	case map[string]any:
		for _, e := range x {
			if !storableNumbers(e) {
				return false
			}
		}
	}
	return true
}

// storableNumber checks one JSON number's text.
func storableNumber(num string) bool {
	if _, err := strconv.ParseFloat(num, 64); err != nil {
		return false
	}
	mant, exp := num, 0
	if i := strings.IndexAny(num, "eE"); i >= 0 {
		e, err := strconv.Atoi(num[i+1:])
		if err != nil || e > maxExponent || e < -maxExponent {
			return false
		}
		mant, exp = num[:i], e
	}
	frac := 0
	if _, f, ok := strings.Cut(mant, "."); ok {
		frac = len(f)
	}
	return frac-exp <= maxNumericScale
}

// jsonDepth is the deepest nesting of objects and arrays in raw, valid
// JSON, found in one pass without recursion: a bracket inside a string
// does not count.
func jsonDepth(raw []byte) int {
	depth, deepest := 0, 0
	inString := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case inString && c == '\\':
			i++ // the escaped byte cannot end the string
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}
