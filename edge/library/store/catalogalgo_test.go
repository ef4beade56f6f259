package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// CatalogAlgorithm names the algorithm of most current digests: files
// that are missing or wait for a new hash do not count, and a tie goes to
// the name that sorts first.
func TestCatalogAlgorithm(t *testing.T) {
	type row struct {
		algo            string
		missing, needed int
	}
	cases := []struct {
		name string
		rows []row
		want string
	}{
		{"empty catalog", nil, ""},
		{"only unhashed files", []row{{"", 0, 1}}, ""},
		{"blake3 most", []row{{AlgoBLAKE3, 0, 0}, {AlgoBLAKE3, 0, 0}, {AlgoSHA256, 0, 0}}, AlgoBLAKE3},
		{"sha256 most", []row{{AlgoBLAKE3, 0, 0}, {AlgoSHA256, 0, 0}, {AlgoSHA256, 0, 0}}, AlgoSHA256},
		{"tie", []row{{AlgoSHA256, 0, 0}, {AlgoBLAKE3, 0, 0}}, AlgoBLAKE3},
		{"missing files do not count", []row{{AlgoSHA256, 1, 0}, {AlgoSHA256, 1, 0}, {AlgoBLAKE3, 0, 0}}, AlgoBLAKE3},
		{"files awaiting a hash do not count", []row{{AlgoBLAKE3, 0, 1}, {AlgoBLAKE3, 0, 1}, {AlgoSHA256, 0, 0}}, AlgoSHA256},
		// A root taken away keeps its files' digests for when it returns.
		{"only missing files' digests", []row{{AlgoSHA256, 1, 0}, {"", 0, 1}}, AlgoSHA256},
		{"only digests awaiting a new hash", []row{{AlgoBLAKE3, 0, 1}, {AlgoBLAKE3, 1, 1}, {AlgoSHA256, 1, 0}}, AlgoBLAKE3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := openTest(t)
			for i, r := range c.rows {
				var algo, hash any
				if r.algo != "" {
					algo, hash = r.algo, strings.Repeat(fmt.Sprintf("%02x", i), 32)
				}
				mustExec(t, s.DB, `INSERT INTO library_files(root, path, size_bytes, mtime_ns, hash_algorithm, content_hash, is_missing, needs_hash)
VALUES ('/lib', ?, 1, 1, ?, ?, ?, ?)`, fmt.Sprintf("/lib/%d", i), algo, hash, r.missing, r.needed)
			}
			got, err := s.CatalogAlgorithm(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("CatalogAlgorithm = %q, want %q", got, c.want)
			}
		})
	}
}

// With no digest recorded, the newest hash job names the algorithm: one
// queued before a restart must not be followed by a re-hash with another.
func TestCatalogAlgorithmFromHashJob(t *testing.T) {
	cases := []struct {
		name     string
		payloads []string // hash jobs, oldest first
		want     string
	}{
		{"no job", nil, ""},
		{"newest wins", []string{`{"algorithm":"blake3"}`, `{"algorithm":"sha256"}`}, AlgoSHA256},
		{"newest wins, other order", []string{`{"algorithm":"sha256"}`, `{"algorithm":"blake3"}`}, AlgoBLAKE3},
		{"unknown algorithm", []string{`{"algorithm":"md5"}`}, ""},
		{"unreadable payload", []string{`{`}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := openTest(t)
			mustExec(t, s.DB, `INSERT INTO jobs(kind, status, payload) VALUES ('scan', 'completed', '{}')`)
			for _, p := range c.payloads {
				mustExec(t, s.DB, `INSERT INTO jobs(kind, status, payload) VALUES ('hash', 'completed', ?)`, p)
			}
			got, err := s.CatalogAlgorithm(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("CatalogAlgorithm = %q, want %q", got, c.want)
			}
		})
	}
}
