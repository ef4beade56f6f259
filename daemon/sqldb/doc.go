// Package sqldb is the SQL engine layer euterpe-central runs on. One URL
// chooses the engine: postgres://… opens a pgx/v5 connection pool, while
// sqlite:PATH (or no URL at all) opens an embedded modernc.org/sqlite file in
// the state directory, so the service runs on a machine with no database
// server. Both are exposed as one *DB over database/sql with the same
// behaviour: queries are written once with ? placeholders (Rebind turns
// them into $n for Postgres), every time column holds Unix microseconds in a
// BIGINT so comparisons and ordering are identical on both engines, and
// write transactions go through Tx, which on SQLite serialises writers in the
// process and opens each transaction with BEGIN IMMEDIATE so two processes
// never deadlock upgrading a read lock.
//
// Migrate applies embedded, versioned goose migrations for the engine. On
// Postgres it holds a session advisory lock while it runs, and on SQLite an
// exclusive file lock, so pods or processes starting together never race
// to create the same table. A Postgres migration waits at most a
// lock_timeout for a table lock, so it never holds the queues' statements
// behind it for long, and is run again a few times when it gave up (not
// one outside a transaction, which may have been partly applied). The
// migration runs on connections of its own, closed when Migrate returns,
// so neither the lock nor the timeout can reach the queues' pool.
//
// A rule for whoever gives a Postgres connection of the pool session
// state (a SET, LISTEN, an advisory lock): undo it, or close the pgx
// connection itself (the pool drops a closed one). Returning
// driver.ErrBadConn does not do it: database/sql then "closes" the
// connection by handing it back to pgx's pool as it is, and pgx reports a
// statement not sent because its context had ended as exactly that error.
package sqldb
