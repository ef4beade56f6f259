package store

import (
	"fmt"
	"strings"

	"github.com/vesta-cx/euterpe/daemon/lease"
)

// Persisted enum values (protocol §2: always the lowercase value).
const (
	KindScan      = "scan"
	KindHash      = "hash"
	KindDelete    = "delete"
	KindThumbnail = "thumbnail"

	StatusPending   = "pending"
	StatusRunning   = "running"
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
	StatusRetryable = "retryable"
	StatusReady     = "ready"
	StatusSucceeded = "succeeded"

	AlgoBLAKE3 = "blake3"
	AlgoSHA256 = "sha256"

	MediaImage = "image"
	MediaVideo = "video"

	FormatJPEG = "jpeg"
	FormatWebP = "webp"

	ModePassive  = "passive"
	ModeRestart  = "restart"
	ModeTruncate = "truncate"
)

// Legal is one enum column and the values §3 allows in it.
type Legal struct {
	Table, Column string
	Values        []string
}

// LegalValues is §3 as data. Migrations install a BEFORE INSERT and a
// BEFORE UPDATE trigger per entry that aborts on any other value.
var LegalValues = []Legal{
	{"jobs", "kind", []string{KindScan, KindHash, KindDelete, KindThumbnail}},
	{"jobs", "status", []string{StatusPending, StatusRunning, StatusCompleted, StatusFailed, StatusCancelled, StatusRetryable}},
	{"scan_sessions", "status", []string{StatusRunning, StatusSucceeded, StatusFailed}},
	{"library_files", "hash_algorithm", []string{AlgoBLAKE3, AlgoSHA256}},
	{"thumbnails", "status", []string{StatusPending, StatusRunning, StatusReady, StatusFailed}},
	{"thumbnails", "media_type", []string{MediaImage, MediaVideo}},
	{"thumbnails", "format", []string{FormatJPEG, FormatWebP}},
	{"thumbnail_cleanup_jobs", "status", []string{StatusPending, StatusRunning, StatusCompleted, StatusFailed}},
	{"wal_maintenance_jobs", "requested_mode", []string{ModePassive, ModeRestart, ModeTruncate}},
	{"wal_maintenance_jobs", "status", []string{StatusPending, StatusRunning, StatusRetryable, StatusCompleted, StatusFailed}},
}

// legalTriggers returns the DDL enforcing l.
func legalTriggers(l Legal) []string {
	quoted := make([]string, len(l.Values))
	for i, v := range l.Values {
		quoted[i] = "'" + v + "'"
	}
	in := strings.Join(quoted, ",")
	msg := fmt.Sprintf("illegal %s.%s value (allowed: %s)", l.Table, l.Column, strings.Join(l.Values, ", "))
	body := fmt.Sprintf("WHEN NEW.%[1]s IS NOT NULL AND NEW.%[1]s NOT IN (%[2]s) BEGIN SELECT RAISE(ABORT, '%[3]s'); END", l.Column, in, msg)
	return []string{
		fmt.Sprintf("CREATE TRIGGER IF NOT EXISTS trg_legal_%[1]s_%[2]s_ins BEFORE INSERT ON %[1]s %[3]s", l.Table, l.Column, body),
		fmt.Sprintf("CREATE TRIGGER IF NOT EXISTS trg_legal_%[1]s_%[2]s_upd BEFORE UPDATE OF %[2]s ON %[1]s %[3]s", l.Table, l.Column, body),
	}
}

// State machines of the protocol (§4) as data; every status write checks
// the move against its table.
var (
	JobMachine = lease.Transitions{
		Machine:  "jobs",
		Terminal: []string{StatusCompleted, StatusFailed, StatusCancelled},
		Allowed: map[string][]string{
			StatusPending:   {StatusRunning, StatusCancelled, StatusRetryable},
			StatusRunning:   {StatusCompleted, StatusFailed, StatusRetryable, StatusCancelled},
			StatusRetryable: {StatusPending, StatusCancelled, StatusFailed},
		},
	}
	ScanSessionMachine = lease.Transitions{
		Machine:  "scan_sessions",
		Terminal: []string{StatusSucceeded, StatusFailed},
		Allowed:  map[string][]string{StatusRunning: {StatusSucceeded, StatusFailed}},
	}
	ThumbnailMachine = lease.Transitions{
		Machine:  "thumbnails",
		Terminal: []string{StatusReady},
		Allowed: map[string][]string{
			StatusPending: {StatusRunning},
			StatusRunning: {StatusReady, StatusFailed, StatusPending},
			StatusFailed:  {StatusPending},
		},
	}
	CleanupMachine = lease.Transitions{
		Machine:  "thumbnail_cleanup_jobs",
		Terminal: []string{StatusCompleted, StatusFailed},
		Allowed: map[string][]string{
			StatusPending: {StatusRunning},
			StatusRunning: {StatusCompleted, StatusFailed, StatusPending},
		},
	}
	WALMachine = lease.Transitions{
		Machine:  "wal_maintenance_jobs",
		Terminal: []string{StatusCompleted, StatusFailed},
		Allowed: map[string][]string{
			StatusPending:   {StatusRunning},
			StatusRetryable: {StatusRunning},
			StatusRunning:   {StatusCompleted, StatusRetryable, StatusFailed},
		},
	}
)

// MustMove panics when from -> to is not in m; statements whose states are
// fixed call it at package initialisation so a table edit that forbids them
// fails every test at once.
func MustMove(m lease.Transitions, from, to string) string {
	if err := m.Check(from, to); err != nil {
		panic(err)
	}
	return to
}
