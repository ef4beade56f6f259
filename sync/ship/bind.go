package ship

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/vesta-cx/euterpe/daemon"
	"github.com/vesta-cx/euterpe/sync/spool"
)

// Binding. The spool's rows carry no edge id: the sender stamps
// Config.EdgeID on each batch as it sends, and derives the event and gap
// ids from it. A spool written under one id and shipped under another (the
// edge re-registered under a new id with its state directory kept, or a
// state directory copied onto another device) would give central the old
// identity's events as the new edge's, store a batch it already has once
// more under new event ids, and, from a copy, take the same backlog from
// two edges. So the id a spool's events were captured under is kept
// beside it, and NewOpening's spool captured under another id is set
// aside, not shipped.

// EdgeIDFile, next to the spool, names the edge id its events were
// captured under.
const EdgeIDFile = "sync.edge-id"

// maxEdgeIDFile bounds what is read of EdgeIDFile: an id is at most 128
// bytes, and a file that is not one must not be read whole into memory.
const maxEdgeIDFile = 4 << 10

// bind returns sp when its events were captured under Config.EdgeID, or
// else a fresh spool opened in its place once sp is set aside. A spool
// without EdgeIDFile beside it is new, or was written by an edge that kept
// no such file, which was running under the id it runs with now: it is
// bound to Config.EdgeID. sp is closed when bind returns an error or
// another spool.
func (s *Shipper) bind(ctx context.Context, sp *spool.Spool) (*spool.Spool, error) {
	idPath := filepath.Join(filepath.Dir(sp.Path()), EdgeIDFile)
	was, err := readEdgeID(idPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		err = writeEdgeID(idPath, s.cfg.EdgeID)
	case err == nil && was == s.cfg.EdgeID:
		return sp, nil
	case err == nil:
		return s.rebind(ctx, sp, idPath, was)
	}
	if err != nil {
		_ = sp.Close()
		return nil, err
	}
	return sp, nil
}

// rebind sets aside sp, captured under the edge id was, and opens a fresh
// spool bound to Config.EdgeID. The spool goes first and the id file after:
// a crash between the two leaves the old id beside an empty spool, which
// the next start sets aside too, rather than the new id beside the old
// backlog, which it would ship.
func (s *Shipper) rebind(ctx context.Context, sp *spool.Spool, idPath, was string) (*spool.Spool, error) {
	path := sp.Path()
	if err := sp.Close(); err != nil {
		return nil, fmt.Errorf("close the spool of another edge id: %w", err)
	}
	aside, err := spool.MoveAside(path, "edge-changed", s.cfg.Now())
	if err != nil {
		return nil, err
	}
	s.log.Error("sync: the spool holds events captured under another edge id; it is set aside and not shipped, and an empty spool took its place",
		"edge_id", s.cfg.EdgeID, "spool_edge_id", daemon.CapMessage(was), "edge_id_file", idPath,
		"spool", path, "set_aside", aside)
	// The old id is kept with the old spool, for whoever reads or ships it.
	if err := writeEdgeID(aside+"."+EdgeIDFile, was); err != nil {
		return nil, err
	}
	if err := writeEdgeID(idPath, s.cfg.EdgeID); err != nil {
		return nil, err
	}
	fresh, err := s.open(ctx)
	if err != nil {
		return nil, err
	}
	s.corruptSetAside(fresh)
	return fresh, nil
}

// readEdgeID reads an EdgeIDFile; a file that is not an id (empty, more
// than one line) is returned as it is, and so differs from every id.
func readEdgeID(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("edge id of the spool: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxEdgeIDFile))
	if err != nil {
		return "", fmt.Errorf("edge id of the spool: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// writeEdgeID writes id to path atomically: written aside, synced and
// renamed into place, so a power cut leaves the old id or the new one,
// never a file that names no edge.
func writeEdgeID(path, id string) error {
	if err := daemon.PlaceFile(path, []byte(id+"\n"), os.Rename); err != nil {
		return fmt.Errorf("edge id of the spool: %w", err)
	}
	return nil
}
