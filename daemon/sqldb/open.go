package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver
)

// Engine names the SQL engine behind a DB.
type Engine string

const (
	Postgres Engine = "postgres"
	SQLite   Engine = "sqlite"
)

// DefaultFile is the embedded database created in the state directory when
// no URL is configured.
const DefaultFile = "central.db"

// DB is a database handle with the knowledge of its engine that the few
// engine-specific statements need.
type DB struct {
	*sql.DB
	Engine Engine
	// Path is the database file for SQLite, empty for Postgres.
	Path string

	pool    *pgxpool.Pool
	writeMu sync.Mutex // SQLite: one writer per process at a time
	// writer is the one connection SQLite write transactions use: SQLite
	// drops a connection's page cache whenever another connection has
	// written, so funnelling every write through one keeps its cache warm.
	writer *sql.Conn
	// stopCheckpoints ends the background WAL checkpointer (SQLite).
	stopCheckpoints func()
	rebinds         sync.Map  // query -> rebound query (Postgres)
	stmts           stmtCache // SQLite statements reused across transactions
	// txConns maps each open Postgres Tx transaction to the connection it
	// runs on, so CopyFrom can stream rows on that connection.
	txConns sync.Map // *sql.Tx -> *sql.Conn
	// syncWAL, when set (tests), replaces the checkpoint loop's fsync of
	// the WAL file.
	syncWAL func(path string) error
	// walQuiet, when not 0 (tests), stands for the constant of that name.
	walQuiet time.Duration
	// settleHold, when set (tests), runs in Settled between a cut-off
	// statement and the end of its backend.
	settleHold func()
}

// Open connects to url: "postgres://…" or "postgresql://…" for Postgres,
// "sqlite:PATH" for a SQLite file (optionally "?synchronous=full": see
// sqliteOptions), and "" for <stateDir>/central.db. It pings the database
// before returning.
func Open(ctx context.Context, rawURL, stateDir string) (*DB, error) {
	switch {
	case strings.HasPrefix(rawURL, "postgres://"), strings.HasPrefix(rawURL, "postgresql://"):
		return openPostgres(ctx, rawURL)
	case rawURL == "":
		if stateDir == "" {
			return nil, errors.New("sqlite: no database URL and no state directory")
		}
		return openSQLite(ctx, sqliteOptions{path: filepath.Join(stateDir, DefaultFile), synchronous: "NORMAL"})
	case strings.HasPrefix(rawURL, "sqlite:"):
		o, err := parseSQLiteURL(rawURL)
		if err != nil {
			return nil, err
		}
		return openSQLite(ctx, o)
	default:
		// Only the scheme: the rest is in no form this package knows
		// where a password would sit in.
		scheme, _, found := strings.Cut(rawURL, ":")
		if !found {
			return nil, errors.New("database URL without a scheme: want postgres://… or sqlite:PATH")
		}
		return nil, fmt.Errorf("database URL of scheme %q: want postgres://… or sqlite:PATH", shownScheme(scheme))
	}
}

// shownScheme is scheme as an error shows it: a scheme holds nothing but
// letters, digits and "+-.", so text with anything else is no scheme (it
// may be a password written where the URL belongs) and is not shown.
func shownScheme(scheme string) string {
	if i := strings.IndexFunc(scheme, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '+' && r != '-' && r != '.'
	}); i >= 0 || len(scheme) > 32 {
		return "…"
	}
	return scheme
}

// CheckURL validates a database URL without connecting, for settings.
func CheckURL(v string) error {
	switch {
	case v == "", strings.HasPrefix(v, "postgres://"), strings.HasPrefix(v, "postgresql://"):
		if v != "" {
			if _, err := pgxpool.ParseConfig(v); err != nil {
				return errors.New("not a valid postgres URL")
			}
			if misreadUserinfo(v) {
				return errMisread
			}
		}
		return nil
	case strings.HasPrefix(v, "sqlite:"):
		_, err := parseSQLiteURL(v)
		return err
	}
	return errors.New("want postgres://… or sqlite:PATH")
}

func openPostgres(ctx context.Context, rawURL string) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse URL %s: %w", shownURL(rawURL), errors.New("invalid URL"))
	}
	// Read as the driver reads it, such a URL names another host, user
	// or database made of pieces of the password, and the driver's
	// errors quote those.
	if misreadUserinfo(rawURL) {
		return nil, fmt.Errorf("postgres at %s: %w", shownURL(rawURL), errMisread)
	}
	// Migrate connects with cfg.ConnConfig on a handle of its own: a
	// hook set on cfg here (BeforeConnect, AfterConnect) must be given to
	// it too.
	if !strings.Contains(rawURL, "pool_max_conns") {
		cfg.MaxConns = 16
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres at %s: %w", shownURL(rawURL), err)
	}
	sdb := stdlib.OpenDBFromPool(pool)
	return &DB{DB: sdb, Engine: Postgres, pool: pool}, nil
}

func openSQLite(ctx context.Context, o sqliteOptions) (*DB, error) {
	path := o.path
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("sqlite: state directory: %w", err)
		}
	}
	sdb, err := sql.Open("sqlite", SQLiteDSN(path, "cache_size(-16384)", "temp_store(MEMORY)", "wal_autocheckpoint(0)",
		"synchronous("+o.synchronous+")"))
	if err != nil {
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	sdb.SetMaxOpenConns(8)
	sdb.SetMaxIdleConns(8)
	sdb.SetConnMaxIdleTime(0)
	if err := sdb.PingContext(ctx); err != nil {
		_ = sdb.Close()
		return nil, fmt.Errorf("sqlite %s: %w", path, ExplainOpen(path, err))
	}
	w, err := sdb.Conn(ctx)
	if err == nil {
		// The writer touches every hot page; give it a larger cache than
		// readers (a ceiling, grown on use), but not a huge one: a commit
		// after a B-tree rebalance that renumbered pages (it parks one at
		// the 1 GiB lock-byte page number) walks the cache's whole hash
		// table, which grows with the pages cached. 256 MiB spent a tenth
		// of a queue drain there; 64 MiB drains 10–15 % faster and no
		// workload measured slower (docs/central.md).
		_, err = w.ExecContext(ctx, "PRAGMA cache_size = -65536")
	}
	if err != nil {
		_ = sdb.Close()
		return nil, fmt.Errorf("sqlite %s: %w", path, err)
	}
	_ = os.Chmod(path, 0o600)
	db := &DB{DB: sdb, Engine: SQLite, Path: path, writer: w}
	db.stopCheckpoints = db.checkpointLoop(250*time.Millisecond, walTruncateFrames)
	return db, nil
}

// Close closes the handle and, for Postgres, its pool.
func (db *DB) Close() error {
	if db.stopCheckpoints != nil {
		db.stopCheckpoints()
	}
	db.stmts.closeStmts()
	if db.writer != nil {
		_ = db.writer.Close()
	}
	err := db.DB.Close()
	if db.pool != nil {
		db.pool.Close()
	}
	return err
}

// Rebind rewrites ? placeholders as $1, $2, … for Postgres; SQLite accepts
// ? as written. Question marks inside quoted literals are left alone.
func (db *DB) Rebind(query string) string {
	if db.Engine != Postgres {
		return query
	}
	if v, ok := db.rebinds.Load(query); ok {
		return v.(string)
	}
	var b strings.Builder
	b.Grow(len(query) + 8)
	Placeholders(query, func(k int, lit string) {
		if k < 0 {
			b.WriteString(lit)
			return
		}
		fmt.Fprintf(&b, "$%d", k+1)
	})
	out := b.String()
	db.rebinds.Store(query, out)
	return out
}

// Tx runs fn in a write transaction and commits when it returns nil. On
// SQLite writers in this process take turns (the file allows one writer) and
// the transaction begins IMMEDIATE on the one writer connection (a context
// ending stops fn's statements, never the writer's transaction from outside,
// and once fn has returned nil the transaction commits: see writerTx); on
// Postgres too a transaction whose fn returned nil commits whatever ctx
// does meanwhile (pgTx), and a serialization failure or deadlock is retried
// a few times. fn
// may run more than once, so it must not have effects outside the
// transaction.
func (db *DB) Tx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if db.Engine == SQLite {
		db.writeMu.Lock()
		defer db.writeMu.Unlock()
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		err = db.tx(ctx, fn)
		if !retryable(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt+1) * 5 * time.Millisecond):
		}
	}
	return err
}

func (db *DB) tx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if db.writer != nil {
		return db.writerTx(ctx, fn)
	}
	if db.Engine != Postgres {
		return InTx(ctx, db.DB, fn)
	}
	return db.pgTx(ctx, fn)
}

// commitWait bounds a Postgres COMMIT, which no longer heeds the caller's
// context: a server that stopped answering must not hold the caller for
// good.
const commitWait = 15 * time.Second

// pgTx runs fn in a Postgres transaction that follows ctx until fn returns
// nil, and commits regardless of ctx from then on. database/sql runs COMMIT
// on the context the transaction began on, and a context that ends while
// COMMIT is on its way makes pgx give up on the connection and ask the
// server to cancel it; a cancel that comes too late (the commit past the
// point where it can be stopped, or the request lost) stops nothing, and
// the caller was told the transaction failed when it committed: a claim
// whose rows then sit leased to nobody, a finish reported lost. Once fn has
// returned nil the transaction commits, as on SQLite (writerTx); a context
// that ended before that rolls it back.
func (db *DB) pgTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	// The transaction runs on a connection of its own so that CopyFrom
	// can reach that connection while the transaction is open.
	conn, err := db.DB.Conn(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer conn.Close()
	txCtx, end := context.WithCancelCause(context.WithoutCancel(ctx))
	defer end(nil)
	follow := context.AfterFunc(ctx, func() { end(context.Cause(ctx)) })
	defer follow()
	var commit *time.Timer
	defer func() {
		if commit != nil {
			commit.Stop()
		}
	}()
	// The level is pinned: a server whose default_transaction_isolation
	// is repeatable read would turn contended SKIP LOCKED claims into
	// serialization failures, and the queues' fencing is written for
	// read committed.
	return inTx(txCtx, conn, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, func(tx *sql.Tx) error {
		db.txConns.Store(tx, conn)
		defer db.txConns.Delete(tx)
		if err := fn(tx); err != nil {
			return err
		}
		if !follow() {
			// ctx ended before fn returned: the transaction is being
			// rolled back already.
			return fmt.Errorf("commit: %w", ctx.Err())
		}
		commit = time.AfterFunc(commitWait, func() { end(context.DeadlineExceeded) })
		return nil
	})
}

// TxStarter is what a transaction begins on: a *sql.DB, or a *sql.Conn when
// writes must stay on one connection.
type TxStarter interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// InTx runs fn in one transaction on b, committing when fn returns nil and
// rolling back otherwise. DB.Tx adds writer serialisation and retries on
// top; stores with a database of their own (the edge library) use it as is.
func InTx(ctx context.Context, b TxStarter, fn func(tx *sql.Tx) error) error {
	return inTx(ctx, b, nil, fn)
}

func inTx(ctx context.Context, b TxStarter, opts *sql.TxOptions, fn func(tx *sql.Tx) error) error {
	tx, err := b.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	// A panic in fn is recovered by whoever is above (net/http recovers a
	// handler's): the transaction must not stay open on its connection
	// meanwhile, least of all on SQLite's one writer, where it would hold
	// the file's write lock and fail every later BEGIN.
	defer func() {
		if p := recover(); p != nil {
			_ = tx.Rollback()
			panic(p)
		}
	}()
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "40001" || pe.Code == "40P01"
	}
	return false
}

// IsUniqueViolation reports a primary-key or unique constraint failure on
// either engine.
func IsUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == "23505"
	}
	return err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed")
}

// Ping checks the database answers; /ready uses it.
func (db *DB) Ping(ctx context.Context) error { return db.PingContext(ctx) }

// shownURL is a database URL as errors show it: everything between "://"
// and the last "@" is hidden, user and password alike, and so are the
// values of the parameters libpq takes a password from
// (postgres://u@h/db?password=…). The user info is taken to end at the last
// "@", not where a URL parser ends it: a password with an unencoded "/",
// "?" or "#" would make a parser read it as a port and a path, and show it.
// Password parameters are hidden first, wherever they stand: an "@" in a
// later parameter's value (application_name=me@pod) would otherwise take
// the query's "?" into the user info and leave the parameters unread. A
// fragment is dropped: the driver ignores it.
func shownURL(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return "[unparseable URL]"
	}
	rest = paramRE.ReplaceAllStringFunc(rest, func(m string) string {
		sub := paramRE.FindStringSubmatch(m)
		if k, err := url.QueryUnescape(sub[2]); err != nil || passwordParam(k) {
			return sub[1] + sub[2] + "=[REDACTED]"
		}
		return m
	})
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		rest = "[REDACTED]@" + rest[at+1:]
	}
	rest, _, _ = strings.Cut(rest, "#")
	return shownScheme(scheme) + "://" + rest
}

// paramRE matches one key=value of a query, wherever a "?" or "&" starts
// one; a key holds no "?", so a "?" inside a misread password does not
// swallow the parameter after it.
var paramRE = regexp.MustCompile(`([?&])([^=&?#]*)=([^&#]*)`)

// errMisread refuses a URL whose password a URL parser would not read as
// one (misreadUserinfo).
var errMisread = errors.New("an @ after the host: a password holding /, ? or # must have them percent-encoded (%2F, %3F, %23)")

// misreadUserinfo reports a URL with an "@" that a URL parser, and so the
// driver, does not take for the end of the user info: one in the path, in
// the fragment or in a query parameter's name, when none came before the
// path. A password with an
// unencoded "/", "?" or "#" puts it there (postgres://u:1234/pw@db/x reads
// as host u, port 1234, database "pw@db/x"); an "@" in a parameter's value
// (application_name=me@host) is fine.
func misreadUserinfo(s string) bool {
	_, rest, ok := strings.Cut(s, "://")
	if !ok {
		return false
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 || strings.Contains(rest[:end], "@") {
		// An "@" before the path ends the user info where a parser ends
		// it: a later one is the database's or a value's (u:p@h/my@db).
		return false
	}
	rest, fragment, _ := strings.Cut(rest[end:], "#")
	path, query, _ := strings.Cut(rest, "?")
	if strings.Contains(path, "@") || strings.Contains(fragment, "@") {
		return true
	}
	for _, p := range strings.Split(query, "&") {
		if name, _, _ := strings.Cut(p, "="); strings.Contains(name, "@") {
			return true
		}
	}
	return false
}

// passwordParam reports the connection parameters whose value is a secret.
func passwordParam(k string) bool {
	k = strings.ToLower(strings.TrimSpace(k))
	return k == "password" || k == "sslpassword"
}
