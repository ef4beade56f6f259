package webhook

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// codeBlock returns the first fenced block of lang in the README.
func codeBlock(t *testing.T, lang string) string {
	t.Helper()
	return codeBlockIn(t, "README.md", lang)
}

// codeBlockIn returns the first fenced block of lang in the repository's
// file doc.
func codeBlockIn(t *testing.T, doc, lang string) string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", "..", doc))
	require.NoError(t, err)
	s := string(text)
	start := strings.Index(s, "```"+lang+"\n")
	require.GreaterOrEqual(t, start, 0, "%s has no %s block", doc, lang)
	s = s[start+len("```"+lang+"\n"):]
	end := strings.Index(s, "```")
	require.GreaterOrEqual(t, end, 0)
	return s[:end]
}

// docs/webhooks.md prints the README's receiver snippets again; only the
// README's are run, so the copies must not differ.
func TestWebhookDocSnippetsMatchREADME(t *testing.T) {
	for _, lang := range []string{"python", "js"} {
		require.Equal(t, codeBlock(t, lang), codeBlockIn(t, "docs/webhooks.md", lang), lang)
	}
}

// The README's receiver snippets are what requesters copy; run them as
// printed against requests signed here, so they cannot drift from Sign.
func TestREADMESnippetsVerify(t *testing.T) {
	body := []byte(`{"event_id":"e1","job_id":"j1","sequence":1,"status":"claimed"}`)
	secret, old := []byte("whsec_current"), []byte("whsec_previous")
	h, err := NewHeaders(time.Now(), "e1", body, secret, old)
	require.NoError(t, err)
	headers := map[string]string{}
	for _, k := range []string{HeaderSignature, HeaderTimestamp, HeaderNonce, HeaderEventID} {
		headers[k] = h.Get(k)
	}
	hj, err := json.Marshal(headers)
	require.NoError(t, err)

	// Each case prints one line per check: valid; replayed nonce; tampered body; wrong secret; old secret only.
	python := codeBlock(t, "python") + `
import json, sys
h = json.loads(sys.argv[1]); body = sys.argv[2].encode()
seen = {}
print(verify(["whsec_current"], h, body, seen))
print(verify(["whsec_current"], h, body, seen))
print(verify(["whsec_current"], h, body + b" ", {}))
print(verify(["whsec_wrong"], h, body, {}))
print(verify(["whsec_previous"], h, body, {}))
`
	node := codeBlock(t, "js") + `
const h = JSON.parse(process.argv[1]); const body = Buffer.from(process.argv[2]);
const seen = new Map();
console.log(verify(["whsec_current"], h, body, seen));
console.log(verify(["whsec_current"], h, body, seen));
console.log(verify(["whsec_current"], h, Buffer.concat([body, Buffer.from(" ")]), new Map()));
console.log(verify(["whsec_wrong"], h, body, new Map()));
console.log(verify(["whsec_previous"], h, body, new Map()));
`
	cases := []struct {
		name, prog string
		args       []string
		want       string
	}{
		{"python", "python3", []string{"-c", python, string(hj), string(body)}, "True\nFalse\nFalse\nFalse\nTrue\n"},
		{"node", "node", []string{"-e", node, string(hj), string(body)}, "true\nfalse\nfalse\nfalse\ntrue\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prog := testsvc.Program(t, tc.prog) // skipped locally without it, a failure in CI
			out, err := exec.Command(prog, tc.args...).CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Equal(t, tc.want, string(out))
		})
	}
}

// The README's snippets refuse what Verify refuses without answering with
// an exception: a nonce with a dot, though correctly signed (a dot lets
// bytes move between the nonce and the body under one MAC input), a
// signature header that is not ASCII (Python's compare_digest raises on
// non-ASCII str, which a web framework turns into a 500), and a timestamp
// that is not 1 to 12 ASCII digits: Python's isdigit and int take other
// scripts' digits (the current time in them, signed as sent, would pass),
// int raises on "²" and on more than 4300 digits, and a float overflows
// on a few hundred; the current time zero-padded is as many digits too.
func TestREADMESnippetsRefuseOddHeaders(t *testing.T) {
	body := []byte(`{"event_id":"e1","job_id":"j1","sequence":1,"status":"claimed"}`)
	secret := []byte("whsec_current")
	ts := time.Now().Unix()
	dotted := "0123456789abcdef.0123456789abcde"
	nonce := "0123456789abcdef0123456789abcdef"
	cases := []map[string]string{
		{HeaderTimestamp: strconv.FormatInt(ts, 10), HeaderNonce: dotted, HeaderEventID: "e1",
			HeaderSignature: Sign(secret, ts, dotted, body)},
		{HeaderTimestamp: strconv.FormatInt(ts, 10), HeaderNonce: nonce, HeaderEventID: "e1",
			HeaderSignature: "v1=é" + strings.Repeat("0", 63)},
	}
	digits := strconv.FormatInt(ts, 10)
	for _, odd := range []string{
		otherDigits(digits, '０'), // full-width
		otherDigits(digits, '٠'), // Arabic-Indic
		"²",
		"000" + digits, // the current time, zero-padded past 12 digits
		strings.Repeat("9", 400),
		strings.Repeat("9", 5000),
	} {
		cases = append(cases, map[string]string{HeaderTimestamp: odd, HeaderNonce: nonce, HeaderEventID: "e1",
			HeaderSignature: signString(secret, odd, nonce, body)})
	}
	// Go refuses both; the snippets must agree.
	for i, c := range cases {
		h := http.Header{}
		for k, v := range c {
			h.Set(k, v)
		}
		_, err := Verify([][]byte{secret}, h, body, time.Now())
		require.Error(t, err, "case %d", i)
	}
	hj, err := json.Marshal(cases)
	require.NoError(t, err)
	python := codeBlock(t, "python") + `
import json, sys
body = sys.argv[2].encode()
for h in json.loads(sys.argv[1]):
    print(verify(["whsec_current"], h, body, {}))
`
	node := codeBlock(t, "js") + `
const body = Buffer.from(process.argv[2]);
for (const h of JSON.parse(process.argv[1])) console.log(verify(["whsec_current"], h, body, new Map()));
`
	for _, tc := range []struct {
		name, prog string
		args       []string
		want       string
	}{
		{"python", "python3", []string{"-c", python, string(hj), string(body)}, strings.Repeat("False\n", len(cases))},
		{"node", "node", []string{"-e", node, string(hj), string(body)}, strings.Repeat("false\n", len(cases))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prog := testsvc.Program(t, tc.prog) // skipped locally without it, a failure in CI
			out, err := exec.Command(prog, tc.args...).CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Equal(t, tc.want, string(out))
		})
	}
}

// otherDigits writes the ASCII digits of s with the digits starting at zero.
func otherDigits(s string, zero rune) string {
	return strings.Map(func(r rune) rune { return zero + r - '0' }, s)
}
