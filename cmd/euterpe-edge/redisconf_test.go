package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// The Redis settings the edge needs, as the operator is told to give them:
// the snippet the package installs as /etc/euterpe/redis.conf, and every
// redis.conf excerpt of the docs. Each must be accepted by the Redis the
// edge runs on (7 and JetPack 6's 6.0): redis-server has no comments after
// a value, and `appendonly yes # …` stops it from starting.
func TestRedisConfigExcerptsLoad(t *testing.T) {
	snippet, err := os.ReadFile("../../systemd/redis-euterpe.conf")
	require.NoError(t, err)
	excerpts := map[string]string{"systemd/redis-euterpe.conf": string(snippet)}
	docs, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	for _, doc := range docs {
		for i, block := range redisConfBlocks(t, doc) {
			excerpts[fmt.Sprintf("docs/%s block %d", filepath.Base(doc), i+1)] = block
		}
	}
	require.Greater(t, len(excerpts), 1, "no redis.conf excerpt found in docs/*.md")
	testsvc.EachRedis(t, func(t *testing.T) {
		exe := redisProgram(t)
		for name, conf := range excerpts {
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				c, _ := startRedis(t, exe, dir, conf)
				for k, want := range map[string]string{"appendonly": "yes", "appendfsync": "everysec", "maxmemory-policy": "noeviction"} {
					got, err := c.ConfigGet(context.Background(), k).Result()
					require.NoError(t, err)
					assert.Equal(t, want, got[k], k)
				}
			})
		}
	})
}

// Turning the snippet on must not lose what a Redis already holds (another
// program's keys, an edge's queue before the settings were added): with
// appendonly switched on only in the file, a restart loads an empty
// append-only file and ignores dump.rdb. The instructions an operator
// reads therefore switch the running server first, and that sequence keeps
// the data. They wait for the rewrite by three fields, not one: while a
// snapshot is being written the rewrite is only scheduled, and
// aof_rewrite_in_progress alone reads 0 over an append-only file still empty.
func TestRedisSnippetSwitchKeepsData(t *testing.T) {
	const step = "CONFIG SET appendonly yes"
	for _, f := range []string{"../../systemd/redis-euterpe.conf", "../../packaging/scripts/postinst", "../../docs/edge.md", "../../README.md"} {
		text, err := os.ReadFile(f)
		require.NoError(t, err)
		assert.True(t, strings.Contains(string(text), step),
			"%s tells how to enable the Redis settings without %q on the running server first", f, step)
		for _, wait := range []string{"aof_rewrite_in_progress", "aof_rewrite_scheduled", "aof_last_bgrewrite"} {
			assert.True(t, strings.Contains(string(text), wait), "%s does not have the operator wait for %s", f, wait)
		}
	}

	testsvc.EachRedis(t, func(t *testing.T) {
		exe := redisProgram(t)
		ctx := context.Background()
		dir := t.TempDir()
		// What a distribution's redis.conf has: snapshots, no append-only file.
		before := "appendonly no\nsave 900 1\n"
		c, stop := startRedis(t, exe, dir, before)
		require.NoError(t, c.XAdd(ctx, &redis.XAddArgs{Stream: "jobs:stream", Values: []string{"job_id", "queued-before"}}).Err())
		require.NoError(t, c.Save(ctx).Err())

		// A snapshot in progress, as a distribution's save rules start them.
		for i := range 5 {
			require.NoError(t, c.Set(ctx, fmt.Sprintf("other:%d", i), "v", 0).Err())
		}
		require.NoError(t, c.ConfigSet(ctx, "rdb-key-save-delay", "300000").Err())
		require.NoError(t, c.BgSave(ctx).Err())
		require.NoError(t, c.ConfigSet(ctx, "rdb-key-save-delay", "0").Err())
		require.NoError(t, c.ConfigSet(ctx, "appendonly", "yes").Err())
		info, err := c.Info(ctx, "persistence").Result()
		require.NoError(t, err)
		require.Contains(t, info, "aof_rewrite_in_progress:0", "the trap: the rewrite has not begun")
		require.Contains(t, info, "aof_rewrite_scheduled:1")
		require.Eventually(t, func() bool {
			info, err := c.Info(ctx, "persistence").Result()
			return err == nil && strings.Contains(info, "aof_rewrite_in_progress:0") &&
				strings.Contains(info, "aof_rewrite_scheduled:0") && strings.Contains(info, "aof_last_bgrewrite_status:ok")
		}, 10*time.Second, 20*time.Millisecond, "the append-only rewrite did not finish")
		stop()

		snippet := filepath.Join(dir, "euterpe.conf")
		data, err := os.ReadFile("../../systemd/redis-euterpe.conf")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(snippet, data, 0o644))
		c, _ = startRedis(t, exe, dir, before+"include "+snippet+"\n")
		n, err := c.XLen(ctx, "jobs:stream").Result()
		require.NoError(t, err)
		assert.Equal(t, int64(1), n, "the queued entry was lost by the switch")
		assert.Equal(t, int64(5), c.Exists(ctx, "other:0", "other:1", "other:2", "other:3", "other:4").Val(), "keys written before the switch were lost")
		got, err := c.ConfigGet(ctx, "appendonly").Result()
		require.NoError(t, err)
		assert.Equal(t, "yes", got["appendonly"])
	})
}

// redisConfBlocks returns the fenced blocks of a Markdown file that set
// appendonly: what an operator copies into a redis.conf.
func redisConfBlocks(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	setsAOF := regexp.MustCompile(`(?m)^\s*appendonly\s`)
	var blocks []string
	var cur []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			if in {
				if b := strings.Join(cur, "\n") + "\n"; setsAOF.MatchString(b) {
					blocks = append(blocks, b)
				}
				cur = nil
			}
			in = !in
			continue
		}
		if in {
			cur = append(cur, line)
		}
	}
	require.NoError(t, sc.Err())
	return blocks
}

// redisProgram is the redis-server program of the server EachRedis chose
// for t, as its INFO names it.
func redisProgram(t *testing.T) string {
	t.Helper()
	shared, _ := testsvc.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := shared.Info(ctx, "server").Result()
	require.NoError(t, err)
	exe := ""
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "executable:"); ok {
			exe = v
		}
	}
	if _, err := os.Stat(exe); err != nil {
		// Started by a name found on PATH, the server reports that name
		// joined to its working directory.
		exe, err = exec.LookPath(filepath.Base(exe))
		require.NoError(t, err, "the shared Redis server's program is not found")
	}
	return exe
}

// startRedis runs exe on a configuration file of conf in dir, listening
// only on a Unix socket there. stop shuts it down as systemctl stop would
// (SIGTERM: it saves and exits) and waits for it; t's cleanup kills it if
// it still runs. A configuration redis-server refuses fails t with its
// message.
func startRedis(t *testing.T, exe, dir, conf string) (*redis.Client, func()) {
	t.Helper()
	sock := filepath.Join(dir, "redis.sock")
	path := filepath.Join(dir, "redis.conf")
	head := fmt.Sprintf("port 0\nunixsocket %s\ndir %s\n", sock, dir)
	require.NoError(t, os.WriteFile(path, []byte(head+conf), 0o644))
	cmd := exec.Command(exe, path)
	var logs testsvc.LogBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if conn, err := net.Dial("unix", sock); err == nil {
			_ = conn.Close()
			break
		}
		select {
		case <-done:
			t.Fatalf("redis-server refused the configuration:\n%s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("redis-server did not listen on %s:\n%s", sock, logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, MaxRetries: -1})
	stop := func() {
		_ = c.Close()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(func() {
		_ = c.Close()
		_ = cmd.Process.Kill()
		<-done
	})
	// A server loading its data answers LOADING until it is done.
	require.Eventually(t, func() bool { return c.Ping(context.Background()).Err() == nil },
		10*time.Second, 10*time.Millisecond, "redis-server did not answer on %s", sock)
	return c, stop
}
