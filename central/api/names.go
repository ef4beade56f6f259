package api

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// unambiguousNames refuses a JSON body (already known to be valid) whose
// meaning depends on the parser reading it:
//
//   - a name repeated within one object: encoding/json lets the last one
//     win, and merges two objects given for one field, where other parsers
//     keep the first or refuse; Postgres jsonb keeps one copy of a repeated
//     metadata name and SQLite both, so the job would read back differently
//     by engine;
//   - outside metadata, a name that is not spelt as the API's fields are
//     (lower-case ASCII letters, digits and '_'): encoding/json matches
//     field names without regard to case, folding "RENDITIONS" and even
//     "ſource" (U+017F) onto a field that DisallowUnknownFields then accepts.
//
// Metadata is the requester's own object: its names may be spelt anyhow,
// but not repeated.
func unambiguousNames(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	type frame struct {
		names   map[string]bool // nil for an array
		meta    bool            // inside metadata
		nextKey bool            // the next string token of this object is a name
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // the end, or an error decode has already reported
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if name, ok := tok.(string); ok && top != nil && top.names != nil && top.nextKey {
			if top.names[name] {
				return &FieldError{Field: "body", Reason: fmt.Sprintf("has the name %q twice in one object", shorten(name))}
			}
			if !top.meta && !fieldSpelling(name) {
				return &FieldError{Field: name, Reason: "is not a known field"}
			}
			top.names[name] = true
			top.nextKey = false
			// The value of the top-level metadata field is the requester's
			// object; the flag is lowered again when that value ends.
			if len(stack) == 1 && name == "metadata" {
				top.meta = true
			}
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			f := &frame{meta: top != nil && top.meta}
			if tok == json.Delim('{') {
				f.names, f.nextKey = map[string]bool{}, true
			}
			stack = append(stack, f)
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: the enclosing object expects a name next.
		if len(stack) > 0 {
			if p := stack[len(stack)-1]; p.names != nil {
				p.nextKey = true
				if len(stack) == 1 {
					p.meta = false
				}
			}
		}
	}
}

// fieldSpelling reports whether name is spelt like the API's field names.
func fieldSpelling(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return name != ""
}

// shorten cuts a name echoed in an error to a readable length.
func shorten(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
