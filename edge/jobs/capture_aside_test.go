package jobs_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// A drops key of another type than the scripts write (a value someone SET
// there) would fail every take, so no later drop would ever be reported.
// The take moves such a key aside, under its name plus ":bad:<unix ms>",
// where it stays for an operator, says so, and goes on taking drops. A
// drops hash of another type also makes the scripts refuse deltas at the
// cap (ErrWrongType); once it is moved aside they are recorded again.
func TestTakeDropsSetsAsideKeysOfAnotherType(t *testing.T) {
	testsvc.EachRedis(t, testTakeDropsSetsAsideKeysOfAnotherType)
}

func testTakeDropsSetsAsideKeysOfAnotherType(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(ctx context.Context, rdb *redis.Client) error
		aside map[string]string // set aside: key -> type
	}{
		{"taken drops hold a string", func(ctx context.Context, rdb *redis.Client) error {
			return rdb.Set(ctx, jobs.CaptureDropsTaken, "kept", 0).Err()
		}, map[string]string{jobs.CaptureDropsTaken: "string"}},
		{"drops hold a string", func(ctx context.Context, rdb *redis.Client) error {
			return rdb.Set(ctx, jobs.CaptureDrops, "kept", 0).Err()
		}, map[string]string{jobs.CaptureDrops: "string"}},
		{"taken drops hold a string that expires", func(ctx context.Context, rdb *redis.Client) error {
			return rdb.Set(ctx, jobs.CaptureDropsTaken, "kept", time.Hour).Err()
		}, map[string]string{jobs.CaptureDropsTaken: "string"}},
		{"both hold a list", func(ctx context.Context, rdb *redis.Client) error {
			if err := rdb.RPush(ctx, jobs.CaptureDropsTaken, "kept").Err(); err != nil {
				return err
			}
			return rdb.RPush(ctx, jobs.CaptureDrops, "kept").Err()
		}, map[string]string{jobs.CaptureDropsTaken: "list", jobs.CaptureDrops: "list"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, rdb := newStore(t)
			st.Capture = jobs.CaptureStream
			st.CaptureMax = 2
			ctx := context.Background()
			a := create(t, st)
			_, err := st.SetRunning(ctx, a, "worker.start", nil) // the stream is at its cap
			require.NoError(t, err)
			require.NoError(t, tc.plant(ctx, rdb))
			if _, ok := tc.aside[jobs.CaptureDrops]; ok {
				_, err = st.AppendEvent(ctx, a, "delta", "worker.delta", json.RawMessage(`{}`))
				require.ErrorIs(t, err, jobs.ErrWrongType, "a delta at the cap cannot be recorded")
			}

			drops, bad, aside, err := jobs.TakeDrops(ctx, rdb, jobs.CaptureStream)
			require.NoError(t, err)
			assert.Empty(t, drops)
			assert.Zero(t, bad)
			require.Len(t, aside, len(tc.aside))
			for _, s := range aside {
				assert.Equal(t, tc.aside[s.Key], s.Type, s.Key)
				assert.True(t, strings.HasPrefix(s.Name, s.Key+":bad:"), s.Name)
				assert.Equal(t, s.Type, rdb.Type(ctx, s.Name).Val(), "kept as it was")
				assert.Equal(t, time.Duration(-1), rdb.TTL(ctx, s.Name).Val(), "kept until an operator deletes it")
			}
			require.NoError(t, jobs.ReleaseDrops(ctx, rdb, jobs.CaptureStream))

			e, err := st.AppendEvent(ctx, a, "delta", "worker.delta", json.RawMessage(`{}`))
			require.NoError(t, err)
			drops, _, aside, err = jobs.TakeDrops(ctx, rdb, jobs.CaptureStream)
			require.NoError(t, err)
			assert.Empty(t, aside)
			require.Len(t, drops, 1, "drops are taken again")
			assert.Equal(t, e, drops[0].FirstEntry)
		})
	}
}

// Setting a key aside never replaces a key set aside before: a name in
// use gets a suffix.
func TestTakeDropsSetsAsideUnderAFreeName(t *testing.T) {
	rdb, _ := testsvc.Redis(t)
	ctx := context.Background()
	// Every name the take could choose in the next five seconds is in use.
	now := time.Now().UnixMilli()
	var used []any
	for ms := now - 1000; ms < now+5000; ms++ {
		used = append(used, jobs.CaptureDropsTaken+":bad:"+strconv.FormatInt(ms, 10), "earlier")
	}
	require.NoError(t, rdb.MSet(ctx, used...).Err())
	require.NoError(t, rdb.Set(ctx, jobs.CaptureDropsTaken, "kept", 0).Err())

	_, _, aside, err := jobs.TakeDrops(ctx, rdb, jobs.CaptureStream)
	require.NoError(t, err)
	require.Len(t, aside, 1)
	assert.Regexp(t, `^`+jobs.CaptureDropsTaken+`:bad:\d+-1$`, aside[0].Name)
	assert.Equal(t, "kept", rdb.Get(ctx, aside[0].Name).Val())
	for i := 0; i < len(used); i += 2 {
		require.Equal(t, "earlier", rdb.Get(ctx, used[i].(string)).Val())
	}
}
