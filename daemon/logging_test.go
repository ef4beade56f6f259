package daemon

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

func TestLoggerRedactsSecrets(t *testing.T) {
	var buf bytes.Buffer
	log, err := NewLogger(&buf, "debug")
	require.NoError(t, err)
	const planted = "hunter2-planted"
	log.Info("connecting",
		"api_key", planted,
		"webhook_secret", planted,
		"Authorization", "Bearer "+planted,
		"url", "redis://:"+planted+"@127.0.0.1:6379/0",
		"err", errors.New("dial postgres://u:"+planted+"@db:5432/x failed"),
		"job_id", "j-1",
	)
	out := buf.String()
	require.NotContains(t, out, planted)
	require.Contains(t, out, `"job_id":"j-1"`)
	require.Contains(t, out, "127.0.0.1:6379")
}

// TestLoggerRedactsValuesNotCounts: a key that only names secrets keeps a
// count, flag or duration as its value; anything that can carry secret
// material under such a key is still blanked.
func TestLoggerRedactsValuesNotCounts(t *testing.T) {
	const planted = "hunter2-planted"
	tests := []struct {
		name string
		attr slog.Attr
		want string // JSON fragment expected in the line
	}{
		{"count of secrets", slog.Int("webhook_secrets", 3), `"webhook_secrets":3`},
		{"unsigned count", slog.Uint64("tokens_issued", 7), `"tokens_issued":7`},
		{"any-wrapped count", slog.Any("sessions", 2), `"sessions":2`},
		{"flag", slog.Bool("has_refresh_token", true), `"has_refresh_token":true`},
		{"ratio", slog.Float64("credential_hit_ratio", 0.5), `"credential_hit_ratio":0.5`},
		{"duration", slog.Duration("session_ttl", time.Hour), `"session_ttl":3600000000000`},
		{"token", slog.String("token", planted), `"token":"[REDACTED]"`},
		{"bearer header", slog.String("Authorization", "Bearer "+planted), `"Authorization":"[REDACTED]"`},
		{"secret string", slog.String("webhook_secret", planted), `"webhook_secret":"[REDACTED]"`},
		{"numeric-looking secret string", slog.String("api_key", "123456"), `"api_key":"[REDACTED]"`},
		{"key bytes", slog.Any("dek", []byte(planted)), `"dek":"[REDACTED]"`},
		{"secret in a struct", slog.Any("credentials", struct{ Secret string }{planted}), `"credentials":"[REDACTED]"`},
		{"secret error", slog.Any("session", errors.New(planted)), `"session":"[REDACTED]"`},
		{"password URL under a secret key", slog.String("database_password_url", "postgres://u:"+planted+"@db/x"), `"database_password_url":"[REDACTED]"`},
		{"password URL under a plain key", slog.String("url", "postgres://u:"+planted+"@db/x"), `"url":"postgres://u:[REDACTED]@db/x"`},
		{"password with a slash", slog.String("url", "postgres://u:1234/"+planted+"@db/x"), `"url":"postgres://u:[REDACTED]@db/x"`},
		{"key in a URL query", slog.String("tasks", "rag=http:http://h/rag?api_key="+planted), `"tasks":"rag=http:http://h/rag?api_key=[REDACTED]"`},
		{"key in an error's URL", slog.Any("err", errors.New(`Get "http://h/x?token=`+planted+`": refused`)), `"err":"Get \"http://h/x?token=[REDACTED]\": refused"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log, err := NewLogger(&buf, "debug")
			require.NoError(t, err)
			log.LogAttrs(context.Background(), slog.LevelInfo, "m", tt.attr)
			require.Contains(t, buf.String(), tt.want)
			require.NotContains(t, buf.String(), planted)
		})
	}
}

func TestLoggerRejectsBadLevel(t *testing.T) {
	_, err := NewLogger(&bytes.Buffer{}, "loud")
	require.Error(t, err)
}

func TestCapMessage(t *testing.T) {
	require.Equal(t, "short", CapMessage("short"))
	long := strings.Repeat("é", 400) // 800 bytes
	got := CapMessage(long)
	require.LessOrEqual(t, len(got), MaxMessage)
	require.True(t, strings.HasPrefix(long, got))
	require.Equal(t, 0, len(got)%2, "no split rune")
	for _, tt := range []struct{ in, want string }{
		{"r\xe9essayez", "r\uFFFDessayez"}, // Latin-1
		{"a\x00b", "a\uFFFDb"},             // NUL
		{"\xff\xfe\x00", "\uFFFD\uFFFD"},   // one run of invalid bytes, then NUL
		{"caf\u00e9 ok", "caf\u00e9 ok"},   // valid text untouched
	} {
		require.Equal(t, tt.want, CapMessage(tt.in), "%q", tt.in)
	}
	// Replacement can lengthen the text; the cap still holds.
	got = CapMessage(strings.Repeat("\xff", 600))
	require.LessOrEqual(t, len(got), MaxMessage)
	require.True(t, utf8.ValidString(got))
}

// A message cut by CapMessage loses no URL secret to the cut, wherever it
// falls: cut between a password's ":" and its "@", or inside a secret
// query value, the redaction a logger applies afterwards would find no
// URL password or whole parameter left to hide.
func TestCapMessageRedactsBeforeCutting(t *testing.T) {
	for _, tail := range []string{
		"postgres://euterpe:PLANTED-pw-0123456789@db.example:5432/euterpe",
		"https://h.example/x?code=PLANTED-code-0123456789&page=2",
	} {
		for pad := MaxMessage - len(tail); pad <= MaxMessage; pad++ {
			msg := strings.Repeat("x", pad) + " " + tail
			got := RedactURL(CapMessage(msg))
			require.LessOrEqual(t, len(got), MaxMessage+len(redacted))
			require.NotContains(t, got, "PLANTED", "cut at %d", pad)
		}
	}
	short := "dial postgres://u:pw@db/x"
	require.Equal(t, short, CapMessage(short), "a message within the cap is left to its caller")
}

func TestWorkerID(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	require.Equal(t, "pod-a", WorkerID(env(map[string]string{"POD_NAME": "pod-a", "HOSTNAME": "h"})))
	require.Equal(t, "h", WorkerID(env(map[string]string{"HOSTNAME": "h"})))
	id := WorkerID(env(nil))
	require.Len(t, id, 36)
	require.Equal(t, id, WorkerID(env(nil)), "stable within one process")
}

func TestRedactURL(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"no url here", "no url here"},
		{"dial redis://:hunter2@10.0.0.5:6379 failed", "dial redis://:[REDACTED]@10.0.0.5:6379 failed"},
		{`connect "postgres://u:pw@db/x"`, `connect "postgres://u:[REDACTED]@db/x"`},
		{"ssh://git@github.com:22/x", "ssh://git@github.com:22/x"}, // a user without a password
		// Glued to other text: no field of its own, and it does not parse.
		{"url=redis://u:pw@h:6379", "url=redis://u:[REDACTED]@h:6379"},
		{"(dsn:postgres://u:p@ss@db/x)", "(dsn:postgres://u:[REDACTED]@db/x)"},
		// libpq URLs also take the password as a parameter.
		{"at postgres://u@db/x?sslmode=disable&password=pw failed", "at postgres://u@db/x?sslmode=disable&password=[REDACTED] failed"},
		{`"postgresql://db/x?user=u&sslpassword=pw&password=pw2"`, `"postgresql://db/x?user=u&sslpassword=[REDACTED]&password=[REDACTED]"`},
		{"https://h/x?PASSWORD=pw#f", "https://h/x?PASSWORD=[REDACTED]#f"},
		{"https://h/x?passwords_total=3", "https://h/x?passwords_total=3"},
		{"no url, password=pw", "no url, password=pw"},
		// A password with an unencoded "/", "?" or "#": a URL parser ends
		// the host there and reads the password as a port and a path.
		{"postgres://euterpe:1234/Xy9SECRET@db.example:5432/euterpe", "postgres://euterpe:[REDACTED]@db.example:5432/euterpe"},
		{"at postgres://u:ab?cd@host/db: refused", "at postgres://u:[REDACTED]@host/db: refused"},
		{"postgres://u:ab#cd@host/db", "postgres://u:[REDACTED]@host/db"},
		{"postgres://u:p%40ss@host/db", "postgres://u:[REDACTED]@host/db"},
		{"postgres://u:pw@[::1]:5432/db", "postgres://u:[REDACTED]@[::1]:5432/db"},
		{"rediss://default:s3cr3t@h:6380/0", "rediss://default:[REDACTED]@h:6380/0"},
		// Nothing that reads as a user name before the colon: all of it goes.
		{"https://h/x?t=10:30@y", "https://[REDACTED]@y"},
		// An "@" after the password hides more, never less.
		{"x=redis://u:pw@h:1,y=http://a:b@c", "x=redis://u:[REDACTED]@c"},
		{"https://h/x?to=a@b.example", "https://h/x?to=a@b.example"}, // no colon: no password
		// A password with a literal space: the "@" after it still ends it.
		{"at postgres://u:pa ss@db/x: refused", "at postgres://u:[REDACTED]@db/x: refused"},
		{"postgres://u:a b c@db/x\npostgres://v@h/y", "postgres://u:[REDACTED]@db/x\npostgres://v@h/y"},
		{"see http://h:8080/x for details", "see http://h:8080/x for details"},
		{"postgres://u:[REDACTED]@h/db", "postgres://u:[REDACTED]@h/db"},
		// Query parameters whose name looks secret.
		{"rag=http:http://h/rag?api_key=XYZ", "rag=http:http://h/rag?api_key=[REDACTED]"},
		{"http://h/x?token=abc&page=2", "http://h/x?token=[REDACTED]&page=2"},
		{"https://b.example/o?X-Amz-Credential=AK%2F1&X-Amz-Signature=ff&X-Amz-Expires=60",
			"https://b.example/o?X-Amz-Credential=[REDACTED]&X-Amz-Signature=[REDACTED]&X-Amz-Expires=60"},
		{"https://h/x?sig=abc&se=2030", "https://h/x?sig=[REDACTED]&se=2030"},
		{"https://h/x?key=k1&apiKey=k2&client_secret=k3&access_token=k4", "https://h/x?key=[REDACTED]&apiKey=[REDACTED]&client_secret=[REDACTED]&access_token=[REDACTED]"},
		{"https://h/x?api%5Fkey=k", "https://h/x?api%5Fkey=[REDACTED]"},
		{"https://h/x?token_type=bearer&key_id=7&max=3", "https://h/x?token_type=bearer&key_id=7&max=3"},
		{"http://h/x?monkey=1", "http://h/x?monkey=1"},
		// Short names for secrets: an Azure Functions key or OAuth code, a
		// password, a token.
		{"https://fn.example/api/x?code=abc%3D%3D&clientId=default", "https://fn.example/api/x?code=[REDACTED]&clientId=default"},
		{"https://h/cb?state=s1&code=4/0Ab", "https://h/cb?state=s1&code=[REDACTED]"},
		{"https://h/x?user=u&pw=p1&jwt=eyJ.x.y&otp=123456&passcode=9", "https://h/x?user=u&pw=[REDACTED]&jwt=[REDACTED]&otp=[REDACTED]&passcode=[REDACTED]"},
		{"https://h/x?error_code=404&Code=1", "https://h/x?error_code=404&Code=[REDACTED]"},
		// Tokens in the fragment (OAuth's implicit flow).
		{"https://app.example/cb#access_token=tok1&token_type=bearer&expires_in=3600", "https://app.example/cb#access_token=[REDACTED]&token_type=bearer&expires_in=3600"},
		{"https://app.example/cb#id_token=eyJ.a.b", "https://app.example/cb#id_token=[REDACTED]"},
		{"https://h/x#section-2", "https://h/x#section-2"},
		// A password holding "#" or "?" and then a secret-looking name=.
		{"postgres://u:ab#code=cd@host/db", "postgres://u:[REDACTED]@host/db"},
		{"postgres://u:ab?token=cd@host/db", "postgres://u:[REDACTED]@host/db"},
	} {
		if got := RedactURL(tt.in); got != tt.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
