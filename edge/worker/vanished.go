package worker

import (
	"fmt"
)

// parseAutoClaim reads a reply of XAUTOCLAIM ... JUSTID: the next cursor,
// the claimed ids and, from Redis 7 on, the ids of pending entries that no
// longer exist in the stream, which Redis has removed from the pending
// list (Redis 6.2 returns those among the claimed ids instead).
func parseAutoClaim(res []any) (next string, ids, deleted []string, err error) {
	if len(res) != 2 && len(res) != 3 {
		return "", nil, nil, fmt.Errorf("a reply of %d parts", len(res))
	}
	next, ok := res[0].(string)
	if !ok {
		return "", nil, nil, fmt.Errorf("a cursor of type %T", res[0])
	}
	if ids, err = stringsOf(res[1]); err != nil {
		return "", nil, nil, fmt.Errorf("claimed ids: %w", err)
	}
	if len(res) == 3 {
		if deleted, err = stringsOf(res[2]); err != nil {
			return "", nil, nil, fmt.Errorf("deleted ids: %w", err)
		}
	}
	return next, ids, deleted, nil
}

func stringsOf(v any) ([]string, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%T, not an array", v)
	}
	out := make([]string, len(a))
	for i, e := range a {
		if out[i], ok = e.(string); !ok {
			return nil, fmt.Errorf("an element of type %T", e)
		}
	}
	return out, nil
}

// logVanished reports pending entries found deleted from the stream: their
// fields, the job id among them, are gone, so nothing ties them to a job
// any more, and the job, if any, stays in its last status until its TTL.
func (p *Pool) logVanished(ids []string) {
	p.log.Error("claimed queue entries no longer exist (deleted or trimmed while pending); their jobs cannot be identified and are not recovered",
		"ids", ids)
}
