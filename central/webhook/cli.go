package webhook

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// maxRequestBody is the largest body the command checks; a larger one is
// refused as a usage error rather than checked cut short.
const maxRequestBody = 16 << 20

// RunVerifyCommand is `euterpectl webhook verify`: it reads one raw HTTP
// request (request line, headers, body — as saved by a receiver or `nc -l`)
// from stdin and checks its signature and timestamp. Secrets come from
// --secret (repeatable: current and previous) or, to keep them out of shell
// history, --secret-env NAME. It prints a JSON line and returns the exit
// code: 0 valid, 1 rejected, 2 usage. A one-shot check has no nonce memory,
// so replays are not detected here.
func RunVerifyCommand(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string, now time.Time) int {
	fs := flag.NewFlagSet("webhook verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var secrets multiFlag
	fs.Var(&secrets, "secret", "webhook secret (repeat for current and previous)")
	envName := fs.String("secret-env", "", "read the secret from this environment variable")
	skew := fs.Duration("skew", DefaultSkew, "allowed timestamp skew")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	// The request comes only from stdin: a file named here would leave
	// the command waiting on the terminal, and flags after it would be
	// dropped unseen. The argument is not echoed: it may be a secret
	// given without --secret.
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, "webhook verify: takes no argument: the request is read from stdin (< saved-request), the secret from --secret or --secret-env")
		return 2
	}
	// An empty value is most often an unset shell variable: taken as a
	// key it could never match, and next to a good one it would hide the
	// mistake behind a valid verdict.
	for _, s := range secrets {
		if s == "" {
			fmt.Fprintln(stderr, "webhook verify: --secret is empty")
			return 2
		}
	}
	envSet := false
	fs.Visit(func(f *flag.Flag) { envSet = envSet || f.Name == "secret-env" })
	if envSet {
		if *envName == "" {
			fmt.Fprintln(stderr, "webhook verify: --secret-env needs the name of an environment variable")
			return 2
		}
		if getenv == nil {
			getenv = os.Getenv
		}
		v := getenv(*envName)
		if v == "" {
			// Not named: the secret itself is sometimes given here.
			fmt.Fprintln(stderr, "webhook verify: --secret-env names an environment variable that is empty or unset")
			return 2
		}
		secrets = append(secrets, v)
	}
	if len(secrets) == 0 {
		fmt.Fprintln(stderr, "webhook verify: give --secret or --secret-env")
		return 2
	}
	// The Verifier reads a skew of 0 or less as its default: a value the
	// user typed must not be swapped for 5 minutes unsaid.
	if *skew <= 0 {
		fmt.Fprintf(stderr, "webhook verify: --skew %s: want a positive duration, e.g. 5m\n", *skew)
		return 2
	}
	req, err := http.ReadRequest(bufio.NewReader(stdin))
	if err != nil {
		fmt.Fprintln(stderr, "webhook verify: stdin is not an HTTP request:", err)
		return 2
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxRequestBody+1))
	if err != nil {
		fmt.Fprintln(stderr, "webhook verify: reading body:", err)
		return 2
	}
	if len(body) > maxRequestBody {
		// Checked cut short, it could only fail as bad_signature: a
		// verdict on a body that was never read in full.
		fmt.Fprintf(stderr, "webhook verify: the request body is over %d MiB, more than this command reads\n", maxRequestBody>>20)
		return 2
	}
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		keys[i] = []byte(s)
	}
	v := &Verifier{Secrets: keys, Skew: *skew, Nonces: NewMemoryNonces(1)}
	d, err := v.Verify(context.Background(), req.Header, body, now)
	enc := json.NewEncoder(stdout)
	if err != nil {
		_ = enc.Encode(map[string]any{"valid": false, "error": err.Error(), "reason": reasonCode(err)})
		return 1
	}
	_ = enc.Encode(map[string]any{"valid": true, "event_id": d.EventID, "timestamp": d.Timestamp.UTC().Format(time.RFC3339)})
	return 0
}

func reasonCode(err error) string {
	for _, c := range []struct {
		err  error
		code string
	}{
		{ErrMissingHeader, "missing_header"}, {ErrBadTimestamp, "bad_timestamp"}, {ErrStaleTimestamp, "stale_timestamp"},
		{ErrBadNonce, "bad_nonce"}, {ErrBadSignature, "bad_signature"}, {ErrReplayedNonce, "replayed_nonce"},
		{ErrNoSecret, "no_secret"}, {ErrEventIDMismatch, "event_id_mismatch"},
	} {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return "error"
}

type multiFlag []string

func (m *multiFlag) String() string { return strings.Repeat("[REDACTED] ", len(*m)) }

func (m *multiFlag) Set(v string) error {
	*m = append(*m, v)
	return nil
}
