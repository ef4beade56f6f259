package jobs

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// QueueAck queues, on pipe, the end of queue messages whose jobs need
// nothing more: XACK for the group, then XDEL, so finished entries leave
// jobs:stream instead of piling up until a trim could drop unfinished ones.
// Deleting after acknowledging is invisible to other consumers: an
// acknowledged entry is never delivered again.
func QueueAck(ctx context.Context, pipe redis.Pipeliner, msgIDs ...string) {
	if len(msgIDs) == 0 {
		return
	}
	pipe.XAck(ctx, QueueStream, Group, msgIDs...)
	pipe.XDel(ctx, QueueStream, msgIDs...)
}

// Ack acknowledges and deletes queue messages in one MULTI (see QueueAck).
func (s *Store) Ack(ctx context.Context, msgIDs ...string) error {
	if len(msgIDs) == 0 {
		return nil
	}
	tx := s.rdb.TxPipeline()
	QueueAck(ctx, tx, msgIDs...)
	if _, err := tx.Exec(ctx); err != nil {
		return fmt.Errorf("ack %d queue messages: %w", len(msgIDs), err)
	}
	return nil
}
