package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/central/operators"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

func TestOperatorCreateAndDisable(t *testing.T) {
	for _, e := range sqltest.Engines {
		t.Run(string(e), func(t *testing.T) {
			c := newCLI(t, e)
			code, out, stderr := c.run("operator", "create", "--name", "alice")
			if code != 0 {
				t.Fatalf("operator create: %d %s", code, stderr)
			}
			var created operators.Created
			if err := json.Unmarshal([]byte(out), &created); err != nil || created.OperatorID == "" || created.Name != "alice" {
				t.Fatalf("output %q: %v", out, err)
			}
			if strings.Contains(stderr, created.Token) {
				t.Fatal("the token reached the log")
			}
			db, _ := c.open()
			store := operators.New(db)
			if _, err := store.Authenticate(context.Background(), created.Token); err != nil {
				t.Fatalf("new token does not authenticate: %v", err)
			}

			for _, args := range [][]string{{"operator", "create"}, {"operator", "create", "--name", " "}, {"operator", "disable"}} {
				if code, _, stderr := c.run(args...); code != 2 || !strings.Contains(stderr, "is required") {
					t.Errorf("%v: %d %s", args, code, stderr)
				}
			}
			if code, _, stderr := c.run("operator", "disable", "--id", created.OperatorID); code != 0 {
				t.Fatalf("operator disable: %d %s", code, stderr)
			}
			if _, err := store.Authenticate(context.Background(), created.Token); !errors.Is(err, operators.ErrUnknownToken) {
				t.Fatalf("disabled token authenticates: %v", err)
			}
			if code, _, _ := c.run("operator", "disable", "--id", "no-such-operator"); code != 1 {
				t.Fatalf("disabling an unknown operator exited %d", code)
			}
		})
	}
}
