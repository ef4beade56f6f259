package wire

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The Redis cap's drop count is optional on the wire both ways: a body
// without it (an edge older than the field) decodes as 0, and an edge that
// never dropped sends none, so a central older than the field (which
// refuses unknown fields) accepts that body as before.
func TestStatusRedisDroppedIsOptional(t *testing.T) {
	s := Status{EdgeID: "jetson-1", SentAt: time.UnixMilli(1700000000000).UTC(), Version: "v1",
		StartedAt: time.UnixMilli(1690000000000).UTC(), Spool: SpoolStatus{Dropped: 2}}
	plain, err := EncodeStatus(s)
	require.NoError(t, err)
	require.NotContains(t, string(plain), "redis_dropped", "0 is left out")

	for _, tc := range []struct {
		name string
		body string
		want string // the body encoded again; "" refused
	}{
		{"older edge", string(plain), string(plain)},
		{"drops", strings.Replace(string(plain), `"edge_id"`, `"redis_dropped":15,"edge_id"`, 1), `"redis_dropped":15`},
		{"explicit zero", strings.Replace(string(plain), `"edge_id"`, `"redis_dropped":0,"edge_id"`, 1), string(plain)},
		{"negative", strings.Replace(string(plain), `"edge_id"`, `"redis_dropped":-1,"edge_id"`, 1), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeStatus([]byte(tc.body))
			if tc.want == "" {
				require.ErrorIs(t, err, ErrInvalid)
				return
			}
			require.NoError(t, err)
			again, err := EncodeStatus(got)
			require.NoError(t, err)
			require.Contains(t, string(again), tc.want)
		})
	}
}
