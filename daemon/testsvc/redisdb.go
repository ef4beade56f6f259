package testsvc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Logical databases 1..testDBs are handed out to tests one at a time, across
// every test process on the machine: a test holds the key
// euterpe:testdb:<n> in database 0 (SET NX with an expiry it keeps
// refreshing) for as long as it uses database n, so two packages tested in
// parallel can never flush each other's keys.
const (
	testDBs       = 15
	dbLockPrefix  = "euterpe:testdb:"
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

// dbLease is one logical database held by one test.
type dbLease struct {
	DB    int
	ctl   *redis.Client
	owner string
	stop  chan struct{}
	done  sync.WaitGroup
}

// acquireDB takes a free logical database, waiting (polling) while all are
// held, until ctx ends. ctl must be a client on database 0.
func acquireDB(ctx context.Context, ctl *redis.Client) (*dbLease, error) {
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
			if ok {
				l := &dbLease{DB: n, ctl: ctl, owner: owner, stop: make(chan struct{})}
				l.done.Add(1)
				go l.keep()
				return l, nil
			}
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

func (l *dbLease) key() string { return dbLockPrefix + fmt.Sprint(l.DB) }

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
