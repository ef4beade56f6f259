package ship

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/edge/jobs"
	"github.com/vesta-cx/euterpe/sync/spool"
)

// moveChildEnv makes the test binary a mover that is SIGKILLed at its
// first XDEL: after the spool transaction committed, before the entries
// left the capture stream. Its value is a moveChild as JSON.
const moveChildEnv = "EUTERPE_SHIP_TEST_MOVE_CHILD"

type moveChild struct {
	Addr   string
	DB     int
	Spool  string
	Budget int64
}

// killAtXDel SIGKILLs the process when an XDEL is about to be sent.
type killAtXDel struct{}

func (killAtXDel) DialHook(next redis.DialHook) redis.DialHook { return next }

func (killAtXDel) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "xdel" {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		return next(ctx, cmd)
	}
}

func (killAtXDel) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func runMoveChild(arg string) {
	var c moveChild
	if err := json.Unmarshal([]byte(arg), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx := context.Background()
	sp, err := spool.Open(ctx, c.Spool, c.Budget)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	rdb := redis.NewClient(&redis.Options{Addr: c.Addr, DB: c.DB})
	rdb.AddHook(killAtXDel{})
	sh, err := New(quiet, rdb, sp, Config{URL: "http://127.0.0.1:1", EdgeID: "jetson-1", Secret: []byte(testSecret)})
	if err == nil {
		_, err = sh.MoveOnce(ctx)
	}
	fmt.Fprintln(os.Stderr, "the move finished without its XDEL:", err)
	os.Exit(2)
}

// An edge SIGKILLed after a move's spool commit and before its XDEL finds
// the entries both in the spool and on the capture stream. The sender may
// ship them (and the spool delete them) before the mover reads the stream
// again; that read must not spool them a second time: they would be
// shipped twice, and, once the budget dropped them, counted in a gap of
// events central already has.
func TestKillBetweenSpoolCommitAndXDelRespoolsNothing(t *testing.T) {
	const budget = 6_000
	h := newHarness(t, budget, nil)
	data := `{"text":"` + strings.Repeat("y", 900) + `"}`
	want := h.written(h.jobs(2, 3, data))
	require.NoError(t, h.sh.Spool().Close()) // the child has the file

	arg, err := json.Marshal(moveChild{Addr: h.rdb.Options().Addr, DB: h.rdb.Options().DB, Spool: h.path, Budget: budget})
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), moveChildEnv+"="+string(arg))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "%s", out)
	ws, ok := exit.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the child was not killed at its XDEL: %v %s", err, out)

	ctx := context.Background()
	h.sh = h.open(budget, nil)
	require.Equal(t, int64(len(want)), h.rdb.XLen(ctx, jobs.CaptureStream).Val(), "the entries are still on the stream")
	for i := 0; ; i++ { // the sender ships the spool before the mover runs
		require.Less(t, i, 100)
		r := h.sh.SendOnce(ctx)
		if r.Idle {
			break
		}
		require.Equal(t, actAccepted, r.Action)
	}
	require.NotEmpty(t, h.rc.Arrivals())
	// More events come while the spool is near its budget: spooled again,
	// the shipped ones would be the first dropped.
	for id, e := range h.written(h.jobs(1, 4, data)) {
		want[id] = e
	}
	h.drain()

	assert.Zero(t, h.rdb.XLen(ctx, jobs.CaptureStream).Val())
	seen := map[string]bool{}
	for _, e := range h.rc.Arrivals() {
		assert.False(t, seen[e.EventID], "%s shipped twice", e.EventID)
		seen[e.EventID] = true
	}
	got := h.rc.Events()
	var gapped int64
	for _, g := range h.rc.Gaps() {
		gapped += g.Count
		for id, e := range got {
			if e.JobID == g.JobID {
				assert.False(t, !entryLess(e.EntryID, g.FirstEntryID) && !entryLess(g.LastEntryID, e.EntryID),
					"%s is stored and counted in gap %s", id, g.GapID)
			}
		}
	}
	assert.Equal(t, int64(len(want)), int64(len(got))+gapped, "events stored plus gaps counted = events written")
}

// entryLess orders stream ids.
func entryLess(a, b string) bool {
	return jobs.MustStreamID(a).Less(jobs.MustStreamID(b))
}
