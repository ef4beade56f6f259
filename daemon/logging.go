package daemon

import (
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// secretKey matches attribute keys whose values must never be written out.
var secretKey = regexp.MustCompile(`(?i)(secret|password|passwd|token|api_?key|authorization|credential|session|signature|private|dek|kek)`)

const redacted = "[REDACTED]"

// NewLogger returns a JSON slog.Logger at level ("debug", "info", "warn",
// "error") whose handler redacts the value of any attribute whose key looks
// secret (unless it is a number, flag, duration or time: see harmless) and
// strips passwords from URLs, so a careless log call cannot leak one.
func NewLogger(w io.Writer, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv, ReplaceAttr: redactAttr})
	return slog.New(h), nil
}

func redactAttr(_ []string, a slog.Attr) slog.Attr {
	if secretKey.MatchString(a.Key) && !harmless(a.Value.Kind()) {
		return slog.String(a.Key, redacted)
	}
	if a.Value.Kind() == slog.KindString {
		return slog.String(a.Key, RedactURL(a.Value.String()))
	}
	if a.Value.Kind() == slog.KindAny {
		if err, ok := a.Value.Any().(error); ok {
			return slog.String(a.Key, CapMessage(RedactURL(err.Error())))
		}
	}
	return a
}

// harmless reports kinds a secret-looking key may keep its value of: a
// count, a flag, a duration or a time ("webhook_secrets": 3,
// "session_ttl": 1h) is about secrets without being one, and blanking it
// only hides what an operator needs. Groups are walked attribute by
// attribute instead. Strings and everything else (byte slices, structs,
// errors) are redacted: that is where secret material lives.
func harmless(k slog.Kind) bool {
	switch k {
	case slog.KindGroup, slog.KindInt64, slog.KindUint64, slog.KindFloat64, slog.KindBool, slog.KindDuration, slog.KindTime:
		return true
	}
	return false
}

// RedactURL hides the secrets of every URL found in s: the password of its
// user info (redis://:hunter2@host:6379 becomes
// redis://:[REDACTED]@host:6379) and the value of each query or fragment
// parameter whose name looks secret (password, sslpassword, api_key, token,
// sig, code, …: see secretParam), where libpq URLs carry a password, HTTP
// endpoints a key and OAuth redirects a token.
// Strings without "://" are returned unchanged so the common case costs
// nothing.
func RedactURL(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	// User info first: a password holding "?" or "#" and a secret-looking
	// "name=" would otherwise lose its "@" to the query's redaction, and
	// the part before the "?" or "#" would stay.
	if strings.Contains(s, "@") {
		s = redactUserinfo(s)
	}
	if strings.Contains(s, "=") {
		s = urlToken.ReplaceAllStringFunc(s, redactQuery)
	}
	return s
}

// redactUserinfo hides, after each "://" in s, everything from the first
// colon up to the last "@" before the next white space: the password. That
// is not where a URL parser ends the user info: a password with an
// unencoded "/", "?" or "#" (postgres://u:1234/pw@db/x) makes it end the
// host early and read the password as a port and a path, so a parsed URL
// would be shown whole. Read this way, an "@" later in the URL (in a query,
// in a second URL glued to the first) hides more than the password, never
// less. A user alone (ssh://git@host) is no secret and stays.
func redactUserinfo(s string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			break
		}
		b.WriteString(s[:i+3])
		s = s[i+3:]
		end := strings.IndexFunc(s, unicode.IsSpace)
		if end < 0 {
			end = len(s)
		}
		at := strings.LastIndexByte(s[:end], '@')
		if at < 0 && strings.Contains(s[:end], ":") {
			// A password holding a literal space (postgres://u:pa ss@db/x)
			// ends the span early: an "@" later on the line may be its end.
			// Read to the line's end, as above, this hides more, never less.
			line := strings.IndexByte(s, '\n')
			if line < 0 {
				line = len(s)
			}
			at = strings.LastIndexByte(s[:line], '@')
		}
		if at < 0 {
			continue
		}
		user, _, hasPassword := strings.Cut(s[:at], ":")
		if !hasPassword {
			continue
		}
		// A "/", "?" or "#" before the colon is no user name's: the whole
		// span may be the secret.
		if !strings.ContainsAny(user, "/?#") {
			b.WriteString(user + ":")
		}
		b.WriteString(redacted + "@")
		s = s[at+1:]
	}
	b.WriteString(s)
	return b.String()
}

// urlToken matches a URL up to the next space or quote; queryParam a
// parameter of its query or of its fragment and the value, up to the next
// parameter: OAuth's implicit flow returns #access_token=… in the
// fragment. A value runs on past a comma: a secret may hold one.
var (
	urlToken   = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]*`)
	queryParam = regexp.MustCompile(`([?&#])([^=&#?\s"'<>]+)=([^&#\s"'<>]*)`)
)

func redactQuery(u string) string {
	return queryParam.ReplaceAllStringFunc(u, func(p string) string {
		m := queryParam.FindStringSubmatch(p)
		if m[3] == "" || !secretParam(m[2]) {
			return p
		}
		return m[1] + m[2] + "=" + redacted
	})
}

// secretParam reports a query parameter name whose value is taken for a
// secret: one whose last word (api_key → key, X-Amz-Signature → signature)
// is one secretKey matches, or a short form of one. Only the last word
// counts, so a name that merely mentions secrets (passwords_total,
// token_type) keeps its value.
func secretParam(name string) bool {
	n, err := url.QueryUnescape(name)
	if err != nil {
		return true // cannot tell what it names
	}
	words := strings.FieldsFunc(strings.ToLower(n), func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9')
	})
	if len(words) == 0 {
		return false
	}
	last := words[len(words)-1]
	if len(words) == 1 && last == "code" {
		// An Azure Functions key or an OAuth authorization code; as the
		// last word of a longer name (error_code, status_code) it is a
		// code of another kind, worth reading.
		return true
	}
	return secretKey.MatchString(last) || secretParamWords[last]
}

// secretParamWords are the short secret names secretKey does not match:
// Google's key=, Azure's sig=, pass=, pwd=, pw=, auth=, jwt=, otp=,
// passcode=.
var secretParamWords = map[string]bool{"key": true, "sig": true, "pass": true, "pwd": true, "pw": true, "auth": true,
	"jwt": true, "otp": true, "passcode": true}

// MaxMessage is the longest error message stored or returned anywhere.
const MaxMessage = 512

// CapMessage cuts s to MaxMessage bytes without splitting a UTF-8 sequence.
// It also makes s text every store can hold: messages carry what others
// sent (a webhook receiver's error page, ffmpeg's stderr, a stage's error),
// and Postgres refuses invalid UTF-8 and NUL in text — a refused write of a
// failure's message would leave the failure unrecorded and the work redone
// forever. Both become U+FFFD.
//
// A string it has to cut has its URLs' secrets hidden first (RedactURL):
// cut first, a URL could lose the "@" that marks its password, and the
// redaction a logger or caller applies afterwards would leave the password
// in. Shorter strings are returned as they are.
func CapMessage(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	if len(s) <= MaxMessage {
		return s
	}
	s = RedactURL(s)
	if len(s) <= MaxMessage {
		return s
	}
	cut := MaxMessage
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
