package testsvc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestInRedis60(t *testing.T) {
	tests := []struct {
		args []string
		ok   bool
	}{
		{[]string{"xreadgroup", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s", ">"}, true},
		{[]string{"XINFO", "GROUPS", "jobs:stream"}, true},
		{[]string{"client", "unblock", "7"}, true},
		{[]string{"XPENDING", "s", "g", "-", "+", "10"}, true},
		{[]string{"XADD", "s", "MAXLEN", "~", "10", "*", "limit", "x"}, true}, // a field named limit
		{[]string{"SET", "k", "GET", "EX", "10"}, true},                       // a value named GET
		{[]string{"XAUTOCLAIM", "s", "g", "c", "0", "0-0"}, false},
		{[]string{"GETDEL", "k"}, false},
		{[]string{"CLIENT", "INFO"}, false},
		{[]string{"CLIENT", "SETINFO", "LIB-NAME", "go-redis"}, false},
		{[]string{"XGROUP", "CREATECONSUMER", "s", "g", "c"}, false},
		{[]string{"XPENDING", "s", "g", "IDLE", "100", "-", "+", "10"}, false},
		{[]string{"XADD", "s", "NOMKSTREAM", "*", "f", "v"}, false},
		{[]string{"SET", "k", "v", "GET"}, false},
		{[]string{"EXPIRE", "k", "10", "NX"}, false},
		{[]string{"XGROUP", "CREATE", "s", "g", "0", "MKSTREAM", "ENTRIESREAD", "0"}, false},
	}
	for _, tc := range tests {
		if why := InRedis60(tc.args); (why == "") != tc.ok {
			t.Errorf("InRedis60(%q) = %q, want ok=%v", tc.args, why, tc.ok)
		}
	}
}

func TestParseRESPCommand(t *testing.T) {
	wire := "*2\r\n$4\r\nPING\r\n$2\r\nhi\r\n*3\r\n$5\r\nXINFO\r\n$6\r\nGROUPS\r\n$1\r\ns\r\n"
	var got [][]string
	b := []byte(wire)
	for {
		args, n := parseRESPCommand(b)
		if n == 0 {
			break
		}
		got = append(got, args)
		b = b[n:]
	}
	if len(got) != 2 || strings.Join(got[0], " ") != "PING hi" || strings.Join(got[1], " ") != "XINFO GROUPS s" || len(b) != 0 {
		t.Fatalf("parsed %q, left %q", got, b)
	}
	// A command split across writes waits for the rest.
	first := len("*2\r\n$4\r\nPING\r\n$2\r\nhi\r\n")
	for cut := 1; cut < first; cut++ {
		if _, n := parseRESPCommand([]byte(wire[:cut])); n != 0 {
			t.Fatalf("partial command of %d bytes parsed", cut)
		}
	}
}

// Both ways of recording see the same commands: the hook on a client built
// here, the dialer on one built from options (pub/sub included).
func TestCommandLogRecords(t *testing.T) {
	_, opts := Redis(t)
	log := NewCommandLog()
	log.Attach(opts)
	c := redis.NewClient(opts)
	defer c.Close()
	hooked := NewCommandLog()
	c.AddHook(hooked)
	ctx := context.Background()
	c.Ping(ctx)
	c.XInfoGroups(ctx, "nothing")
	_, _ = c.TxPipelined(ctx, func(p redis.Pipeliner) error { p.Incr(ctx, "n"); return nil })
	ps := c.PSubscribe(ctx, "x:*")
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	_ = ps.Close()
	for _, name := range []string{"PING", "XINFO GROUPS", "MULTI", "INCR", "EXEC", "PSUBSCRIBE", "SELECT"} {
		if !log.Sent(name) {
			t.Errorf("wire log lacks %s: %v", name, log.Names())
		}
	}
	for _, name := range []string{"PING", "XINFO GROUPS", "MULTI", "INCR", "EXEC"} {
		if !hooked.Sent(name) {
			t.Errorf("hook log lacks %s: %v", name, hooked.Names())
		}
	}
	if slices.Contains(hooked.Names(), "") {
		t.Error("empty name recorded")
	}
	log.CheckRedis60(t)
	hooked.CheckRedis60(t)
}

// errRecorder collects what a check reports instead of failing the test.
type errRecorder struct {
	testing.TB
	errs []string
}

func (r *errRecorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func (r *errRecorder) Error(args ...any) { r.errs = append(r.errs, fmt.Sprint(args...)) }

// The checks report what they are for: a newer command or option, a
// script command the scan cannot read; an allowed name passes.
func TestChecksReport(t *testing.T) {
	dir := t.TempDir()
	src := "package x\n\nconst s = `\nredis.call('XADD', KEYS[1], 'NOMKSTREAM', '*', 'f', ARGV[1])\n" +
		"redis.pcall(\"GETDEL\", KEYS[1])\nlocal c = 'GET'\nredis.call(c, KEYS[1])\nredis.call('HSET', KEYS[1], 'a', ARGV[1])\n`\n"
	if err := os.WriteFile(filepath.Join(dir, "x.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &errRecorder{TB: t}
	found := CheckLuaRedis60(r, dir)
	if len(r.errs) != 3 || !strings.Contains(r.errs[0], "NOMKSTREAM") || !strings.Contains(r.errs[1], "GETDEL") ||
		!strings.Contains(r.errs[2], "not a string literal") || !slices.Contains(found, "HSET") {
		t.Fatalf("errors %q, found %v", r.errs, found)
	}

	l := NewCommandLog()
	l.record([]string{"XAUTOCLAIM", "s", "g", "c", "0", "0-0", "JUSTID"})
	l.record([]string{"CLIENT", "SETINFO", "LIB-NAME", "go-redis"})
	r = &errRecorder{TB: t}
	l.CheckRedis60(r)
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "XAUTOCLAIM") {
		t.Fatalf("errors %q", r.errs)
	}
	r = &errRecorder{TB: t}
	l.CheckRedis60(r, "XAUTOCLAIM")
	if len(r.errs) != 0 {
		t.Fatalf("allowed name reported: %q", r.errs)
	}
}
