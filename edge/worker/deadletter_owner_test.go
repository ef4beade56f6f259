package worker

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
	"github.com/vesta-cx/euterpe/edge/jobs"
)

// A message is dead-lettered only by the consumer it is pending under, and
// so once: a pool whose claim was lost (its heartbeat late, another
// consumer took the message over) or that meets a message already ended
// writes no second jobs:dead entry and acknowledges nothing of another's.
func TestDeadLetterOnlyByOwner(t *testing.T) {
	testsvc.EachRedis(t, func(t *testing.T) {
		tests := []struct {
			name      string
			owner     string // consumer the message is pending under; "" once ended
			wantDead  int64
			wantOwner string // consumer it is pending under afterwards; "" none
		}{
			{"own message", "me", 1, ""},
			{"claimed by another consumer", "other", 0, "other"},
			{"already ended", "", 0, ""},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				rdb, st, _ := newRedis(t)
				ctx := context.Background()
				create(t, st, "chat", `{}`)
				res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: jobs.Group, Consumer: "me",
					Streams: []string{jobs.QueueStream, ">"}, Count: 1}).Result()
				require.NoError(t, err)
				msg := res[0].Messages[0]
				switch tc.owner {
				case "":
					require.NoError(t, st.Ack(ctx, msg.ID))
				case "me":
				default:
					require.NoError(t, rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: jobs.QueueStream, Group: jobs.Group,
						Consumer: tc.owner, Messages: []string{msg.ID}}).Err())
				}
				p, err := New(nil, rdb, st, "me", testSettings(), nil)
				require.NoError(t, err)
				p.deadLetter(ctx, entry{msg: msg, deliveries: 2}, CodeUnknownStatus, false)
				// A second attempt (the same pool, or another) adds nothing.
				p.deadLetter(ctx, entry{msg: msg, deliveries: 2}, CodeUnknownStatus, false)

				assert.Equal(t, tc.wantDead, rdb.XLen(ctx, jobs.DeadStream).Val())
				pend := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: jobs.QueueStream, Group: jobs.Group,
					Start: "-", End: "+", Count: 10}).Val()
				if tc.wantOwner == "" {
					assert.Empty(t, pend)
				} else {
					require.Len(t, pend, 1)
					assert.Equal(t, tc.wantOwner, pend[0].Consumer)
					assert.Len(t, rdb.XRange(ctx, jobs.QueueStream, msg.ID, msg.ID).Val(), 1, "entry kept")
				}
			})
		}
	})
}
