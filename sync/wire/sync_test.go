package wire

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/central/webhook"
)

func gap(job, first, last string) Gap {
	return Gap{GapID: GapID("jetson-1", job, first), JobID: job, Type: "delta", Count: 3,
		FirstEntryID: first, LastEntryID: last, FirstTS: 1700000000000, LastTS: 1700000000500}
}

func TestGapsRoundTripAndGapOnlyBatch(t *testing.T) {
	b := sample()
	b.Dropped = []Gap{gap("job-1", "1700000000000-1", "1700000000500-0")}
	body, err := Encode(b)
	require.NoError(t, err)
	got, err := Decode(body)
	require.NoError(t, err)
	require.Equal(t, b.Dropped, got.Dropped)

	only := Batch{EdgeID: "jetson-1", SentAt: b.SentAt, Dropped: b.Dropped}
	body, err = Encode(only)
	require.NoError(t, err)
	_, err = Decode(body)
	require.NoError(t, err)
}

func TestGapRejects(t *testing.T) {
	cases := map[string]func(*Gap){
		"forged id":     func(g *Gap) { g.GapID = "jetson-1:job-1:gap:9-9" },
		"zero count":    func(g *Gap) { g.Count = 0 },
		"huge count":    func(g *Gap) { g.Count = 1<<62 + 1 },
		"bad entry":     func(g *Gap) { g.LastEntryID = "x" },
		"unordered ts":  func(g *Gap) { g.LastTS = g.FirstTS - 1 },
		"missing type":  func(g *Gap) { g.Type = "" },
		"path-like job": func(g *Gap) { g.JobID = "../x"; g.GapID = GapID("jetson-1", "../x", g.FirstEntryID) },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			b := sample()
			g := gap("job-1", "1700000000000-1", "1700000000500-0")
			f(&g)
			b.Dropped = []Gap{g}
			raw, _ := json.Marshal(b)
			_, err := Decode(raw)
			require.ErrorIs(t, err, ErrInvalid)
		})
	}
}

func TestStatusRoundTripAndRejects(t *testing.T) {
	s := Status{EdgeID: "jetson-1", SentAt: time.UnixMilli(1700000000000).UTC(), Version: "v1", StartedAt: time.UnixMilli(1690000000000).UTC(),
		UptimeS: 10, Workers: 2, Backlog: 3, Spool: SpoolStatus{Events: 4, Bytes: 500, OldestTS: 1700000000000},
		Library: &LibraryStatus{Files: 10, DuplicateGroups: 1, Bytes: 1 << 20}}
	body, err := EncodeStatus(s)
	require.NoError(t, err)
	got, err := DecodeStatus(body)
	require.NoError(t, err)
	require.Equal(t, s, got)
	for name, raw := range map[string]string{
		"unknown field":  strings.Replace(string(body), `"edge_id"`, `"x":1,"edge_id"`, 1),
		"negative count": strings.Replace(string(body), `"backlog":3`, `"backlog":-1`, 1),
		"bad edge":       strings.Replace(string(body), `"jetson-1"`, `"a b"`, 1),
		"trailing":       string(body) + "{}",
	} {
		_, err := DecodeStatus([]byte(raw))
		require.ErrorIs(t, err, ErrInvalid, name)
		require.Equal(t, name == "unknown field", errors.Is(err, ErrUnsupported), "%s: %v", name, err)
	}
}

func TestCompressAndBomb(t *testing.T) {
	body, err := Encode(sample())
	require.NoError(t, err)
	out, err := Decompress(Compress(body), MaxBodyBytes)
	require.NoError(t, err)
	require.Equal(t, body, out)

	// 64 MiB of zeros compresses to ~64 KiB: refused after limit+1 bytes.
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(make([]byte, 64<<20))
	_ = zw.Close()
	_, err = Decompress(buf.Bytes(), MaxBodyBytes)
	require.ErrorIs(t, err, ErrTooLarge)
	require.ErrorIs(t, err, ErrInvalid)

	_, err = Decompress([]byte("not gzip"), MaxBodyBytes)
	require.ErrorIs(t, err, ErrInvalid)
	require.NotErrorIs(t, err, ErrTooLarge)
	truncated := Compress(body)
	_, err = Decompress(truncated[:len(truncated)/2], MaxBodyBytes)
	require.ErrorIs(t, err, ErrInvalid)
}

func TestSignSetsEdgeHeaderAndVerifies(t *testing.T) {
	now := time.Unix(1700000000, 0)
	secret := []byte("edge-secret")
	b := Batch{EdgeID: "jetson-1", SentAt: now, Dropped: []Gap{gap("job-1", "1-0", "2-0")}}
	body := Compress([]byte("{}"))
	req, _ := http.NewRequest(http.MethodPost, "http://central"+BatchPath, bytes.NewReader(body))
	require.NoError(t, Sign(req, now, b, body, secret))
	require.Equal(t, "jetson-1", req.Header.Get(HeaderEdgeID))
	d, err := webhook.Verify([][]byte{secret}, req.Header, body, now)
	require.NoError(t, err)
	require.Equal(t, b.Dropped[0].GapID, d.EventID)

	s := Status{EdgeID: "jetson-1", SentAt: now}
	hb, _ := EncodeStatus(s)
	req, _ = http.NewRequest(http.MethodPost, "http://central"+HeartbeatPath, bytes.NewReader(hb))
	require.NoError(t, SignHeartbeat(req, now, s, hb, secret))
	d, err = webhook.Verify([][]byte{secret}, req.Header, hb, now)
	require.NoError(t, err)
	require.Equal(t, HeartbeatID("jetson-1", now), d.EventID)
}
