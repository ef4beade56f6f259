package sqldb

import (
	"net/url"
	"slices"
	"strings"
)

// SQLiteDSN is the modernc.org/sqlite data source name every SQLite file in
// Euterpe opens with: WAL journal, NORMAL sync (durable at checkpoints and
// never corrupt), foreign keys, a busy timeout so a writer waits for another
// instead of failing, and BEGIN IMMEDIATE transactions so two writers never
// deadlock upgrading read locks. extra pragmas (e.g. "wal_autocheckpoint(0)")
// are appended and replace a default of the same name ("synchronous(FULL)");
// checkpoint policy is the caller's, because the edge library runs
// checkpoints as jobs of its own.
func SQLiteDSN(path string, extra ...string) string {
	q := url.Values{}
	for _, p := range []string{"busy_timeout(15000)", "journal_mode(WAL)", "foreign_keys(1)", "synchronous(NORMAL)"} {
		if !slices.ContainsFunc(extra, func(e string) bool { return pragmaName(e) == pragmaName(p) }) {
			q.Add("_pragma", p)
		}
	}
	for _, p := range extra {
		q.Add("_pragma", p)
	}
	q.Set("_txlock", "immediate")
	return "file:" + uriPath.Replace(path) + "?" + q.Encode()
}

// uriPath escapes what SQLite's URI filenames would otherwise read as syntax:
// it decodes %HH and ends the path at '?' or '#', so a state directory named
// "a#b" would put the database in a file "a" beside it, outside the directory
// and its permissions.
var uriPath = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")

// pragmaName is the name of a DSN pragma, "synchronous" of "synchronous(FULL)".
func pragmaName(p string) string {
	name, _, _ := strings.Cut(p, "(")
	return strings.ToLower(strings.TrimSpace(name))
}
