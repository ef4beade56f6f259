package sqldb

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// sqliteOptions are what a sqlite:PATH URL may set after a '?'.
type sqliteOptions struct {
	path string
	// synchronous is the PRAGMA synchronous of every connection: NORMAL by
	// default, which in WAL mode never corrupts the file and loses nothing
	// when only the process dies; a power cut (or kernel crash) can lose the
	// transactions committed since the last WAL sync, which the checkpoint
	// loop does every 250 ms when anything was committed. FULL syncs the WAL on every commit, for operators
	// who want no committed transaction lost to a power cut either.
	synchronous string
}

// parseSQLiteURL splits "sqlite:PATH[?synchronous=normal|full|extra]".
func parseSQLiteURL(raw string) (sqliteOptions, error) {
	rest := strings.TrimPrefix(strings.TrimPrefix(raw, "sqlite:"), "//")
	p, query, _ := strings.Cut(rest, "?")
	o := sqliteOptions{path: p, synchronous: "NORMAL"}
	if p == "" {
		return o, errors.New("sqlite: URL names no file (want sqlite:PATH)")
	}
	vals, err := url.ParseQuery(query)
	if err != nil {
		return o, fmt.Errorf("sqlite: URL options: %w", err)
	}
	for k, v := range vals {
		switch {
		case k == "synchronous" && len(v) == 1:
			switch s := strings.ToUpper(v[0]); s {
			case "NORMAL", "FULL", "EXTRA":
				o.synchronous = s
			default:
				return o, fmt.Errorf("sqlite: synchronous=%q: want normal, full or extra", v[0])
			}
		default:
			return o, fmt.Errorf("sqlite: unknown URL option %q (want synchronous=normal|full|extra)", k)
		}
	}
	return o, nil
}
