package testsvc

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The edge daemon must run on Redis 6.0 (JetPack's Ubuntu): a command newer
// than 6.0 may only be sent behind feature detection. CommandLog records
// what a client really sends so a test can hold a flow to that rule.

// redis60 is every command of Redis 6.0. Commands with subcommands are
// listed in redis60Sub instead and recorded as "COMMAND SUBCOMMAND".
var redis60 = words(`APPEND AUTH BGREWRITEAOF BGSAVE BITCOUNT BITFIELD BITOP BITPOS BLPOP BRPOP BRPOPLPUSH
BZPOPMAX BZPOPMIN DBSIZE DECR DECRBY DEL DISCARD DUMP ECHO EVAL EVALSHA EXEC EXISTS EXPIRE EXPIREAT
FLUSHALL FLUSHDB GEOADD GEODIST GEOHASH GEOPOS GEORADIUS GEORADIUSBYMEMBER GEORADIUS_RO
GEORADIUSBYMEMBER_RO GET GETBIT GETRANGE GETSET HDEL HELLO HEXISTS HGET HGETALL HINCRBY HINCRBYFLOAT
HKEYS HLEN HMGET HMSET HSCAN HSET HSETNX HSTRLEN HVALS INCR INCRBY INCRBYFLOAT INFO KEYS LASTSAVE
LINDEX LINSERT LLEN LPOP LPUSH LPUSHX LRANGE LREM LSET LTRIM MGET MIGRATE MONITOR MOVE MSET MSETNX
MULTI PERSIST PEXPIRE PEXPIREAT PFADD PFCOUNT PFMERGE PING PSETEX PSUBSCRIBE PTTL PUBLISH PUNSUBSCRIBE
QUIT RANDOMKEY READONLY READWRITE RENAME RENAMENX RESTORE ROLE RPOP RPOPLPUSH RPUSH RPUSHX SADD SAVE
SCAN SCARD SDIFF SDIFFSTORE SELECT SET SETBIT SETEX SETNX SETRANGE SINTER SINTERSTORE SISMEMBER
SMEMBERS SMOVE SORT SPOP SRANDMEMBER SREM SSCAN STRALGO STRLEN SUBSCRIBE SUNION SUNIONSTORE SWAPDB
TIME TOUCH TTL TYPE UNLINK UNSUBSCRIBE UNWATCH WAIT WATCH XACK XADD XCLAIM XDEL XLEN XPENDING XRANGE
XREAD XREADGROUP XREVRANGE XSETID XTRIM ZADD ZCARD ZCOUNT ZINCRBY ZINTERSTORE ZLEXCOUNT ZPOPMAX
ZPOPMIN ZRANGE ZRANGEBYLEX ZRANGEBYSCORE ZRANK ZREM ZREMRANGEBYLEX ZREMRANGEBYRANK ZREMRANGEBYSCORE
ZREVRANGE ZREVRANGEBYLEX ZREVRANGEBYSCORE ZREVRANK ZSCAN ZSCORE ZUNIONSTORE`)

// redis60Sub holds the subcommands Redis 6.0 has of each command that has
// them (CLIENT INFO, CLIENT SETINFO, XGROUP CREATECONSUMER … are newer).
var redis60Sub = map[string]map[string]bool{
	"CLIENT":  words("CACHING GETNAME GETREDIR ID KILL LIST PAUSE REPLY SETNAME TRACKING UNBLOCK"),
	"XINFO":   words("CONSUMERS GROUPS STREAM HELP"),
	"XGROUP":  words("CREATE SETID DESTROY DELCONSUMER HELP"),
	"SCRIPT":  words("DEBUG EXISTS FLUSH KILL LOAD"),
	"CONFIG":  words("GET SET RESETSTAT REWRITE"),
	"COMMAND": words("COUNT GETKEYS INFO"),
	"OBJECT":  words("ENCODING FREQ HELP IDLETIME REFCOUNT"),
	"MEMORY":  words("DOCTOR HELP MALLOC-STATS PURGE STATS USAGE"),
	"PUBSUB":  words("CHANNELS NUMPAT NUMSUB"),
	"ACL":     words("CAT DELUSER GENPASS GETUSER HELP LIST LOAD LOG SAVE SETUSER USERS WHOAMI"),
}

// laterOptions are options of 6.0 commands that only newer servers accept,
// looked for from argument index from (0 is the command name) up to the
// argument stop (exclusive; "" for the end).
var laterOptions = []struct {
	cmd   string
	from  int
	stop  string
	words map[string]bool
}{
	{"SET", 3, "", words("GET EXAT PXAT")},                          // 6.2
	{"XADD", 2, "*", words("NOMKSTREAM MINID LIMIT")},               // 6.2
	{"XTRIM", 2, "", words("MINID LIMIT")},                          // 6.2
	{"XPENDING", 3, "", words("IDLE")},                              // 6.2
	{"XGROUP CREATE", 5, "", words("ENTRIESREAD")},                  // 7.0
	{"XGROUP SETID", 5, "", words("ENTRIESREAD")},                   // 7.0
	{"EXPIRE", 3, "", words("NX XX GT LT")},                         // 7.0
	{"PEXPIRE", 3, "", words("NX XX GT LT")},                        // 7.0
	{"EXPIREAT", 3, "", words("NX XX GT LT")},                       // 7.0
	{"PEXPIREAT", 3, "", words("NX XX GT LT")},                      // 7.0
	{"ZADD", 2, "", words("GT LT")},                                 // 6.2
	{"CLIENT KILL", 2, "", words("LADDR MAXAGE NO-EVICT NO-TOUCH")}, // 6.2+
}

// handshake are commands go-redis sends while opening a connection and
// whose rejection by an older server it ignores (it goes on with the
// connection), so they are not features the daemon relies on.
var handshake = map[string]bool{"CLIENT SETINFO": true, "CLIENT MAINT_NOTIFICATIONS": true}

func words(s string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(s) {
		m[w] = true
	}
	return m
}

// CommandName is the name a command is recorded under: its first argument
// upper-cased, followed by the subcommand for commands that have them
// ("XINFO GROUPS", "CLIENT UNBLOCK").
func CommandName(args []string) string {
	if len(args) == 0 {
		return ""
	}
	name := strings.ToUpper(args[0])
	if _, ok := redis60Sub[name]; ok && len(args) > 1 {
		name += " " + strings.ToUpper(args[1])
	}
	return name
}

// InRedis60 says why the command (all its arguments) would be refused by
// Redis 6.0, or "" when 6.0 runs it.
func InRedis60(args []string) string { return inRedis60(args, false) }

// inRedis60 checks args; anywhere looks for newer options in every
// argument after the name (for Lua, where only the literals are known).
func inRedis60(args []string, anywhere bool) string {
	name := CommandName(args)
	head, sub, hasSub := strings.Cut(name, " ")
	if hasSub {
		if !redis60Sub[head][sub] {
			return name + " is newer than Redis 6.0"
		}
	} else if !redis60[head] {
		if _, container := redis60Sub[head]; !container {
			return name + " is newer than Redis 6.0"
		}
	}
	for _, o := range laterOptions {
		if o.cmd != name {
			continue
		}
		from := o.from
		if anywhere {
			from = 1
		}
		for i := from; i < len(args); i++ {
			if o.stop != "" && args[i] == o.stop {
				break
			}
			if o.words[strings.ToUpper(args[i])] {
				return fmt.Sprintf("%s option %s is newer than Redis 6.0", name, strings.ToUpper(args[i]))
			}
		}
	}
	return ""
}

// CommandLog records every command its clients send. Hook it into a client
// built here (AddHook) and, for clients that other code builds from
// options (a dedicated reader, pub/sub connections), Attach it to the
// options: that wraps the dialer and reads the commands off the wire.
type CommandLog struct {
	mu   sync.Mutex
	seen map[string]int
	bad  map[string]string // name → first reason
}

// NewCommandLog returns an empty log.
func NewCommandLog() *CommandLog {
	return &CommandLog{seen: map[string]int{}, bad: map[string]string{}}
}

func (l *CommandLog) record(args []string) {
	name := CommandName(args)
	if name == "" {
		return
	}
	why := InRedis60(args)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen[name]++
	if why != "" {
		if _, ok := l.bad[name]; !ok {
			l.bad[name] = why
		}
	}
}

func (l *CommandLog) recordCmd(cmd redis.Cmder) {
	raw := cmd.Args()
	args := make([]string, len(raw))
	for i, a := range raw {
		args[i] = fmt.Sprint(a)
	}
	l.record(args)
}

// DialHook passes dials through (part of redis.Hook).
func (l *CommandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook records each command (part of redis.Hook).
func (l *CommandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.recordCmd(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook records each command of a pipeline or transaction,
// MULTI and EXEC included (part of redis.Hook).
func (l *CommandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			l.recordCmd(c)
		}
		return next(ctx, cmds)
	}
}

// Attach makes every connection of clients built from opt record what it
// writes, handshakes and pub/sub included.
func (l *CommandLog) Attach(opt *redis.Options) {
	base := opt.Dialer
	if base == nil {
		o := *opt
		if o.DialTimeout == 0 {
			o.DialTimeout = 5 * time.Second
		}
		base = redis.NewDialer(&o)
	}
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := base(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &wireConn{Conn: c, log: l}, nil
	}
}

// Reset forgets what was recorded.
func (l *CommandLog) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = map[string]int{}
	l.bad = map[string]string{}
}

// Names lists the recorded command names, sorted.
func (l *CommandLog) Names() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.seen))
	for n := range l.seen {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Sent reports whether the command name was recorded.
func (l *CommandLog) Sent(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.seen[name] > 0
}

// CheckRedis60 fails t for every recorded command (or option) Redis 6.0
// lacks, except the names in allowed (the feature-detected path under
// test) and go-redis's own connection handshake.
func (l *CommandLog) CheckRedis60(t testing.TB, allowed ...string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for name, why := range l.bad {
		if slices.Contains(allowed, name) || handshake[name] {
			continue
		}
		t.Errorf("sent %s: %s", name, why)
	}
	if len(l.seen) == 0 {
		t.Error("no command recorded: the log is not attached")
	}
}

// wireConn parses the RESP arrays a client writes.
type wireConn struct {
	net.Conn
	log *CommandLog
	mu  sync.Mutex
	buf []byte
}

func (c *wireConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.buf = append(c.buf, p...)
	for {
		args, n := parseRESPCommand(c.buf)
		if n == 0 {
			break
		}
		c.buf = c.buf[n:]
		if args != nil {
			c.log.record(args)
		}
	}
	if len(c.buf) == 0 {
		c.buf = nil
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// parseRESPCommand reads one command (an array of bulk strings) from the
// front of b, returning it and the bytes it took, or n == 0 when b does not
// hold a whole command yet. Anything else (inline commands, which go-redis
// never writes) is skipped a line at a time with nil args.
func parseRESPCommand(b []byte) (args []string, n int) {
	line := func(at int) (string, int, bool) {
		i := bytes.Index(b[at:], []byte("\r\n"))
		if i < 0 {
			return "", 0, false
		}
		return string(b[at : at+i]), at + i + 2, true
	}
	head, pos, ok := line(0)
	if !ok {
		return nil, 0
	}
	if !strings.HasPrefix(head, "*") {
		return nil, pos
	}
	count, err := strconv.Atoi(head[1:])
	if err != nil || count < 0 {
		return nil, pos
	}
	args = make([]string, 0, count)
	for range count {
		h, next, ok := line(pos)
		if !ok {
			return nil, 0
		}
		size, err := strconv.Atoi(strings.TrimPrefix(h, "$"))
		if !strings.HasPrefix(h, "$") || err != nil || size < 0 {
			return nil, next
		}
		if len(b) < next+size+2 {
			return nil, 0
		}
		args = append(args, string(b[next:next+size]))
		pos = next + size + 2
	}
	return args, pos
}

// luaCall matches redis.call / redis.pcall and the text of its arguments.
var luaCall = regexp.MustCompile(`redis\.p?call\(([^)]*)\)`)

// luaString matches a single- or double-quoted Lua string literal.
var luaString = regexp.MustCompile(`'([^']*)'|"([^"]*)"`)

// CheckLuaRedis60 scans the Go files (tests excluded) of dir for Lua
// redis.call / redis.pcall and fails t for a command Redis 6.0 lacks, a
// literal option newer than 6.0, or a command name that is not a string
// literal (which the scan could not check). It returns the names found.
func CheckLuaRedis60(t testing.TB, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range luaCall.FindAllStringSubmatch(string(src), -1) {
			call := strings.TrimSpace(m[1])
			lits := luaString.FindAllStringSubmatch(call, -1)
			if len(lits) == 0 || !strings.HasPrefix(call, lits[0][0]) {
				t.Errorf("%s: %s: command name is not a string literal", filepath.Base(f), m[0])
				continue
			}
			args := make([]string, len(lits))
			for i, s := range lits {
				args[i] = s[1] + s[2]
			}
			if why := inRedis60(args, true); why != "" {
				t.Errorf("%s: %s: %s", filepath.Base(f), m[0], why)
			}
			found = append(found, CommandName(args))
		}
	}
	return found
}
