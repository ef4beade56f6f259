package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// PageText bounds, in bytes, each payload, result, error and dead-letter
// payload the pages show: clients and workers of any implementation
// write them, nothing bounds what a worker stores, and a page holding
// megabytes of them is slow to build and to render. The JSON API still
// returns them whole.
const PageText = 4 << 10

// Clip returns the start of s, at most PageText bytes cut at a rune
// boundary, followed by a line giving the whole length when s is longer;
// invalid UTF-8 becomes U+FFFD. total is the size reported, the length
// of what s was made from (s may be an indented form of it).
func Clip(s string, total int) string {
	if len(s) <= PageText {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	cut := PageText
	for i := 0; i < utf8.UTFMax && cut > 0 && !utf8.RuneStart(s[cut]); i++ {
		cut--
	}
	return strings.ToValidUTF8(s[:cut], "\uFFFD") + fmt.Sprintf("\n… truncated (%d bytes in all)", total)
}

// Pretty indents a JSON document for display and clips it. A document far
// larger than what is shown is clipped as stored: indenting it whole would
// cost more than the page is worth.
func Pretty(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	if len(raw) > 4*PageText {
		return Clip(string(raw), len(raw))
	}
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return Clip(string(raw), len(raw))
	}
	return Clip(b.String(), len(raw))
}
