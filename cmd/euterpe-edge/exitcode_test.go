package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// A setting refused only while the components are built (a program
// EUTERPE_TASK_BACKENDS names is missing, llm bound without
// EUTERPE_LLM_BASE_URL) stops the process like one refused at parse: one
// line on stderr naming it, exit status 2, which the unit does not restart
// (RestartPreventExitStatus=2).
func TestSettingRefusedAtBuildExitsTwo(t *testing.T) {
	_, opt := testsvc.Redis(t)
	for _, tt := range []struct {
		name string
		env  []string
	}{
		{"missing program", []string{"EUTERPE_TASK_BACKENDS=tool=exec:/nonexistent/tool"}},
		{"llm without a base URL", []string{"EUTERPE_TASK_BACKENDS=chat=llm"}},
		{"key in a backend URL", []string{"EUTERPE_TASK_BACKENDS=rag=http:http://127.0.0.1:1/rag?api_key=hunter2-planted,tool=exec:/nonexistent/tool"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			var env []string
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "EUTERPE_") && !strings.HasPrefix(kv, "NOTIFY_SOCKET=") {
					env = append(env, kv)
				}
			}
			cmd.Env = append(env, append([]string{
				serveChildEnv + "=1",
				"EUTERPE_REDIS_URL=" + redisURLFor(opt),
				"EUTERPE_EDGE_ADDR=" + freeAddr(t),
				"EUTERPE_STATE_DIR=" + t.TempDir(),
			}, tt.env...)...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			var err error
			select {
			case err = <-exited:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
				t.Fatalf("still running; stderr:\n%s", stderr.String())
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 {
				t.Fatalf("exit %v, want status 2; stderr:\n%s", err, stderr.String())
			}
			last := lastLine(stderr.String())
			if !strings.HasPrefix(last, "euterpe-edge: ") || !strings.Contains(last, "EUTERPE_TASK_BACKENDS") {
				t.Errorf("last line %q, want the refused setting named", last)
			}
			if strings.Contains(stderr.String()+stdout.String(), "hunter2-planted") {
				t.Errorf("the key in the URL was printed:\n%s", stderr.String())
			}
		})
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
