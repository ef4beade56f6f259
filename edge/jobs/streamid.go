package jobs

import (
	"errors"
	"strconv"
	"strings"
)

// StreamID is a parsed Redis stream entry id "<ms>-<seq>".
type StreamID struct{ MS, Seq uint64 }

// ErrBadStreamID is returned for a string that is not a stream entry id.
var ErrBadStreamID = errors.New("not a stream entry id (want <ms>-<seq>)")

// ParseStreamID parses "<ms>-<seq>" or "<ms>" (sequence 0).
func ParseStreamID(s string) (StreamID, error) {
	if s == "" || len(s) > 41 {
		return StreamID{}, ErrBadStreamID
	}
	msPart, seqPart, hasSeq := strings.Cut(s, "-")
	ms, err := strconv.ParseUint(msPart, 10, 64)
	if err != nil {
		return StreamID{}, ErrBadStreamID
	}
	var seq uint64
	if hasSeq {
		if seq, err = strconv.ParseUint(seqPart, 10, 64); err != nil {
			return StreamID{}, ErrBadStreamID
		}
	}
	return StreamID{MS: ms, Seq: seq}, nil
}

// MustStreamID parses an id Redis returned; a malformed one sorts first.
func MustStreamID(s string) StreamID {
	id, _ := ParseStreamID(s)
	return id
}

func (id StreamID) String() string {
	return strconv.FormatUint(id.MS, 10) + "-" + strconv.FormatUint(id.Seq, 10)
}

// Less orders ids as Redis does.
func (id StreamID) Less(o StreamID) bool {
	return id.MS < o.MS || (id.MS == o.MS && id.Seq < o.Seq)
}

// Next is the smallest id greater than id. XRANGE with Next(after) as its
// start is the exclusive range "(after" of Redis 6.2, on Redis 6.0. The
// largest id has no successor and is its own Next: wrapping to 0-0 would
// turn "after the end" (a client's Last-Event-ID may say anything) into
// "from the start".
func (id StreamID) Next() StreamID {
	const max = ^uint64(0)
	switch {
	case id.MS == max && id.Seq == max:
		return id
	case id.Seq == max:
		return StreamID{MS: id.MS + 1}
	}
	return StreamID{MS: id.MS, Seq: id.Seq + 1}
}
