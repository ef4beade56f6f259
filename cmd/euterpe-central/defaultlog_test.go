package main

import (
	"bytes"
	"context"
	"encoding/json"
	stdlog "log"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// What logs through slog's default logger or the standard log package
// once a command runs (a library's fallback, net/http) writes JSON lines to
// the command's log with secrets redacted, like every other line. A secret
// setting given as a flag is warned about, naming the flag and never the
// value: every local user can read a command line.
func TestCommandLogsStrayOutputAsJSONAndWarnsOfSecretFlags(t *testing.T) {
	testsvc.KeepDefaultLog(t)
	dbURL := "sqlite:" + filepath.Join(t.TempDir(), "flag-given.db")
	env := map[string]string{"EUTERPE_STATE_DIR": t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	if code := run(ctx, []string{"migrate", "-database-url", dbURL}, func(k string) string { return env[k] }, &out, &errb); code != 0 {
		t.Fatalf("migrate: exit %d\n%s", code, errb.String())
	}
	slog.Default().Warn("through slog's default", "password", "hunter2-default")
	stdlog.Print("through the standard log: postgres://u:hunter2-stdlib@db/x")

	var warned, viaDefault, viaStdlib bool
	for _, line := range strings.Split(strings.TrimSpace(errb.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		msg, _ := rec["msg"].(string)
		switch {
		case rec["flag"] == "-database-url":
			warned = true
			if rec["level"] != "WARN" || !strings.Contains(msg, "/proc/<pid>/cmdline") || !strings.Contains(msg, "EUTERPE_DATABASE_URL_FILE") {
				t.Errorf("warning %q", line)
			}
			if strings.Contains(line, "flag-given.db") {
				t.Errorf("the warning repeats the value: %q", line)
			}
		case msg == "through slog's default":
			viaDefault = true
			if rec["password"] != "[REDACTED]" {
				t.Errorf("not redacted: %q", line)
			}
		case strings.HasPrefix(msg, "through the standard log"):
			viaStdlib = true
		}
	}
	if !warned || !viaDefault || !viaStdlib {
		t.Errorf("warned %v, slog's default %v, standard log %v; log:\n%s", warned, viaDefault, viaStdlib, errb.String())
	}
	if strings.Contains(errb.String(), "hunter2") {
		t.Errorf("a secret in the log:\n%s", errb.String())
	}
}
