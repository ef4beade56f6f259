package daemon

import (
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
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

// RedactURL replaces the password of any URL with userinfo found in s, e.g.
// redis://:hunter2@host:6379 becomes redis://:[REDACTED]@host:6379, and the
// value of a password or sslpassword parameter of a URL's query, where libpq
// URLs may carry it (postgres://u@db/x?password=…). Strings without "://"
// are returned unchanged so the common case costs nothing.
func RedactURL(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	if passwordParam.MatchString(s) {
		s = urlToken.ReplaceAllStringFunc(s, func(u string) string {
			return passwordParam.ReplaceAllString(u, "${1}"+redacted)
		})
	}
	if !strings.Contains(s, "@") {
		return s
	}
	fields := strings.Fields(s)
	changed := false
	for i, f := range fields {
		if !strings.Contains(f, "://") || !strings.Contains(f, "@") {
			continue
		}
		u, err := url.Parse(strings.Trim(f, `"'()<>,`))
		if err != nil || u.User == nil {
			continue
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), redacted)
			fields[i] = strings.Replace(f, strings.Trim(f, `"'()<>,`), u.String(), 1)
			changed = true
		}
	}
	if changed {
		s = strings.Join(fields, " ")
	}
	// A URL glued to other text ("url=redis://u:pw@h", "(dsn:postgres://…")
	// is no field of its own and does not parse; its password still goes.
	return userinfo.ReplaceAllString(s, "${1}"+redacted+"@")
}

// urlToken matches a URL up to the next space or quote; passwordParam a
// password parameter of its query and the value, up to the next parameter.
var (
	urlToken      = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]*`)
	passwordParam = regexp.MustCompile(`(?i)([?&](?:ssl)?password=)[^&#\s"'<>]*`)
)

// userinfo matches a URL's scheme, user and colon, then its password.
var userinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:]*:)[^\s/?#]+@`)

// MaxMessage is the longest error message stored or returned anywhere.
const MaxMessage = 512

// CapMessage cuts s to MaxMessage bytes without splitting a UTF-8 sequence.
// It also makes s text every store can hold: messages carry what others
// sent (a webhook receiver's error page, ffmpeg's stderr, a stage's error),
// and Postgres refuses invalid UTF-8 and NUL in text — a refused write of a
// failure's message would leave the failure unrecorded and the work redone
// forever. Both become U+FFFD.
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
	cut := MaxMessage
	for cut > 0 && !utf8RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
