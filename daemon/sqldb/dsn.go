package sqldb

import "net/url"

// SQLiteDSN is the modernc.org/sqlite data source name every SQLite file in
// Euterpe opens with: WAL journal, NORMAL sync (durable at checkpoints and
// never corrupt), foreign keys, a busy timeout so a writer waits for another
// instead of failing, and BEGIN IMMEDIATE transactions so two writers never
// deadlock upgrading read locks. extra pragmas (e.g. "wal_autocheckpoint(0)")
// are appended; checkpoint policy is the caller's, because the edge library
// runs checkpoints as jobs of its own.
func SQLiteDSN(path string, extra ...string) string {
	q := url.Values{}
	for _, p := range append([]string{"busy_timeout(15000)", "journal_mode(WAL)", "foreign_keys(1)", "synchronous(NORMAL)"}, extra...) {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	return "file:" + path + "?" + q.Encode()
}
