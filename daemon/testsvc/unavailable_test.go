package testsvc

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// childService selects the child role of this test binary: the test
// TestUnavailableChild then asks for that service ("redis" or "postgres")
// at the closed address the parent configured.
const childService = "EUTERPE_TESTSVC_CHILD"

// TestUnavailableChild only runs as the child of
// TestUnavailableFailsUnderCI.
func TestUnavailableChild(t *testing.T) {
	switch os.Getenv(childService) {
	case "":
		t.Skip("runs only as the child of TestUnavailableFailsUnderCI")
	case "redis":
		Redis(t)
	case "postgres":
		Postgres(t)
	case "s3":
		S3(t)
	case "redis6":
		EachRedis(t, func(t *testing.T) {
			if strings.HasSuffix(t.Name(), "/redis6.0") {
				Redis(t)
			}
		})
	}
	t.Log("service answered")
}

// closedAddr returns a local address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// A test whose service does not answer is skipped on a developer machine
// and fails when CI=true, for every service helper.
func TestUnavailableFailsUnderCI(t *testing.T) {
	addr := closedAddr(t)
	services := []struct {
		name  string
		child string
		env   string
	}{
		{"redis", "redis", "EUTERPE_TEST_REDIS_URL=redis://" + addr + "/0"},
		{"redis unset", "redis", "EUTERPE_TEST_REDIS_URL="}, // never a default server
		{"postgres unset", "postgres", "EUTERPE_TEST_POSTGRES_URL="},
		{"s3 unset", "s3", "EUTERPE_TEST_S3_ENDPOINT="},
		{"postgres", "postgres", "EUTERPE_TEST_POSTGRES_URL=postgres://postgres@" + addr + "/postgres?sslmode=disable&connect_timeout=2"},
		{"redis6.0", "redis6", Redis6Env + "=redis://" + addr + "/0"},
		{"redis6.0 unset", "redis6", Redis6Env + "="},
	}
	for _, svc := range services {
		for _, ci := range []struct {
			env      []string
			wantFail bool
		}{{[]string{"CI=true"}, true}, {nil, false}} {
			name := svc.name + "/CI unset"
			if ci.wantFail {
				name = svc.name + "/CI=true"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				cmd := exec.Command(os.Args[0], "-test.run=^TestUnavailableChild$", "-test.v", "-test.count=1")
				env := []string{childService + "=" + svc.child, svc.env}
				for _, kv := range os.Environ() {
					k, _, _ := strings.Cut(kv, "=")
					if k != "CI" && k != childService && k != "EUTERPE_TEST_REDIS_URL" && k != "EUTERPE_TEST_POSTGRES_URL" && k != Redis6Env && k != "EUTERPE_TEST_S3_ENDPOINT" {
						env = append(env, kv)
					}
				}
				cmd.Env = append(env, ci.env...)
				out, err := cmd.CombinedOutput()
				text := string(out)
				if ci.wantFail {
					if err == nil {
						t.Fatalf("child passed under CI=true:\n%s", text)
					}
					if _, ok := err.(*exec.ExitError); !ok {
						t.Fatalf("child did not run: %v", err)
					}
					if !strings.Contains(text, "--- FAIL: TestUnavailableChild") || !strings.Contains(text, "unavailable") {
						t.Fatalf("want --- FAIL naming the unavailable service:\n%s", text)
					}
					return
				}
				if err != nil {
					t.Fatalf("child failed without CI: %v\n%s", err, text)
				}
				if !strings.Contains(text, "--- SKIP: TestUnavailableChild") || !strings.Contains(text, "scripts/services.sh up") {
					t.Fatalf("want --- SKIP saying how to start the service:\n%s", text)
				}
			})
		}
	}
}
