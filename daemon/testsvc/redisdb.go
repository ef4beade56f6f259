package testsvc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vesta-cx/euterpe/daemon"
)

// Logical databases 1..testDBs are handed out to tests one at a time, across
// every test process on the machine: a test holds the key
// euterpe:testdb:<n> in database 0 (SET NX with an expiry it keeps
// refreshing) for as long as it uses database n, so two packages tested in
// parallel can never flush each other's keys.
//
// A database is flushed only while it holds nothing but test keys: it is
// empty, or its marker euterpe:testdb:<n>:written (database 0, set when a
// test takes it, deleted once the test's cleanup flushed it) says tests
// wrote what is in it (a test that crashed, say). Anything else is someone
// else's data, on a server the user named: it is left alone and the test
// fails with a ForeignKeysError. Check and flush are one Lua script, so a
// key written in between cannot be lost.
const (
	testDBs       = 15
	dbLockPrefix  = "euterpe:testdb:"
	markerSuffix  = ":written"
	dbLockTTL     = 2 * time.Minute // a crashed test process frees its db after this
	dbLockRefresh = 30 * time.Second
	dbLockWait    = 3 * time.Minute // give up (fail the test) after waiting this long
)

var (
	dbOwnerSeq atomic.Int64
	dbOwnerTag = fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
)

// releaseScript deletes a lock only while it is still ours.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// refreshScript extends a lock only while it is still ours.
var refreshScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`)

// claimScript marks database ARGV[1] as written by owner ARGV[2] (marker
// KEYS[1], in database 0) and flushes it, but only when it is empty or
// already marked; otherwise it returns the number of keys in it, untouched.
var claimScript = redis.NewScript(`
redis.call('SELECT', tonumber(ARGV[1]))
local size = redis.call('DBSIZE')
redis.call('SELECT', 0)
if size > 0 and redis.call('EXISTS', KEYS[1]) == 0 then return size end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SELECT', tonumber(ARGV[1]))
redis.call('FLUSHDB')
redis.call('SELECT', 0)
return 0`)

// flushScript flushes database ARGV[1] and drops its marker KEYS[1], only
// while the marker is still owner ARGV[2]'s.
var flushScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[2] then return 0 end
redis.call('SELECT', tonumber(ARGV[1]))
redis.call('FLUSHDB')
redis.call('SELECT', 0)
redis.call('DEL', KEYS[1])
return 1`)

// surveyScript lists, as db, key count pairs, the databases 1..ARGV[1]
// holding keys without a marker. Markers of empty databases no test holds
// are dropped, so a marker never outlives the test keys it vouches for.
var surveyScript = redis.NewScript(`
local out = {}
for n = 1, tonumber(ARGV[1]) do
  redis.call('SELECT', n)
  local size = redis.call('DBSIZE')
  redis.call('SELECT', 0)
  local marker = ARGV[2] .. n .. ARGV[3]
  if size > 0 and redis.call('EXISTS', marker) == 0 then
    table.insert(out, n)
    table.insert(out, size)
  elseif size == 0 and redis.call('EXISTS', ARGV[2] .. n) == 0 then
    redis.call('DEL', marker)
  end
end
return out`)

// ForeignKeysError says the databases tests would flush hold keys that no
// test wrote: the server is someone else's.
type ForeignKeysError struct {
	Server string        // the server's address, password redacted
	Keys   map[int]int64 // database → number of keys in it
}

func (e *ForeignKeysError) Error() string {
	dbs := make([]int, 0, len(e.Keys))
	for n := range e.Keys {
		dbs = append(dbs, n)
	}
	slices.Sort(dbs)
	var b strings.Builder
	for i, n := range dbs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d (%d keys)", n, e.Keys[n])
	}
	return daemon.CapMessage(fmt.Sprintf("refusing to use redis at %s: database %s holds keys no test wrote, "+
		"and tests flush databases 1..%d; name a Redis whose databases 1..%d are empty "+
		"(EUTERPE_TEST_REDIS_URL), or unset it and use the private one of scripts/services.sh up",
		e.Server, b.String(), testDBs, testDBs))
}

// surveyed caches, per server URL, what survey found: a server found
// foreign once is refused without asking it again.
var surveyed sync.Map // url -> error (nil when clean)

// survey checks every test database of the server before a first test of
// this process runs on it, so a foreign server is refused whichever
// database a test happens to be handed.
func survey(ctx context.Context, ctl *redis.Client, server string) error {
	if v, ok := surveyed.Load(server); ok {
		err, _ := v.(error)
		return err
	}
	res, err := surveyScript.Run(ctx, ctl, nil, testDBs, dbLockPrefix, markerSuffix).Int64Slice()
	if err != nil {
		return fmt.Errorf("survey test databases: %w", err)
	}
	var found error
	if len(res) > 0 {
		fe := &ForeignKeysError{Server: daemon.RedactURL(server), Keys: map[int]int64{}}
		for i := 0; i+1 < len(res); i += 2 {
			fe.Keys[int(res[i])] = res[i+1]
		}
		found = fe
	}
	surveyed.Store(server, found)
	return found
}

// dbLease is one logical database held by one test.
type dbLease struct {
	DB    int
	ctl   *redis.Client
	owner string
	stop  chan struct{}
	done  sync.WaitGroup
}

// acquireDB takes a free logical database, marked and flushed, waiting
// (polling) while all are held, until ctx ends. ctl must be a client on
// database 0. A database holding keys no test wrote is not taken: the lock
// is given back and the error is a *ForeignKeysError naming server.
func acquireDB(ctx context.Context, ctl *redis.Client, server string) (*dbLease, error) {
	seq := dbOwnerSeq.Add(1)
	owner := fmt.Sprintf("%s-%d", dbOwnerTag, seq)
	start := int((int64(os.Getpid()) + seq) % testDBs) // spread first tries
	for {
		for i := range testDBs {
			n := 1 + (start+i)%testDBs
			ok, err := ctl.SetNX(ctx, dbLockPrefix+fmt.Sprint(n), owner, dbLockTTL).Result()
			if err != nil {
				return nil, fmt.Errorf("lock test db %d: %w", n, err)
			}
			if !ok {
				continue
			}
			l := &dbLease{DB: n, ctl: ctl, owner: owner, stop: make(chan struct{})}
			size, err := claimScript.Run(ctx, ctl, []string{l.marker()}, n, owner).Int64()
			if err == nil && size > 0 {
				err = &ForeignKeysError{Server: daemon.RedactURL(server), Keys: map[int]int64{n: size}}
			}
			if err != nil {
				_ = releaseScript.Run(context.WithoutCancel(ctx), ctl, []string{l.key()}, owner).Err()
				return nil, fmt.Errorf("test db %d: %w", n, err)
			}
			l.done.Add(1)
			go l.keep()
			return l, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("every test db (1..%d) is in use: %w", testDBs, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// keep refreshes the lock until release.
func (l *dbLease) keep() {
	defer l.done.Done()
	t := time.NewTicker(dbLockRefresh)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = refreshScript.Run(ctx, l.ctl, []string{l.key()}, l.owner, dbLockTTL.Milliseconds()).Err()
			cancel()
		}
	}
}

func (l *dbLease) key() string    { return dbLockPrefix + fmt.Sprint(l.DB) }
func (l *dbLease) marker() string { return l.key() + markerSuffix }

// flush empties the database, only while its marker is still this lease's
// (a test whose lock expired must not flush what the next holder wrote).
func (l *dbLease) flush(ctx context.Context) error {
	return flushScript.Run(ctx, l.ctl, []string{l.marker()}, l.DB, l.owner).Err()
}

// release stops the refresh and frees the database if the lock is still ours.
func (l *dbLease) release() error {
	close(l.stop)
	l.done.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := releaseScript.Run(ctx, l.ctl, []string{l.key()}, l.owner).Err()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	return err
}
