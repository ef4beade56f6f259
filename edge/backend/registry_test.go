package backend

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/daemon"
)

func TestParseTasks(t *testing.T) {
	tests := []struct {
		spec    string
		want    int
		wantErr string
	}{
		{"", 0, ""},
		{"chat=llm,plan=llm , code=llm,embed=llm", 4, ""},
		{"tool=exec:/bin/sh -c true,rag=http:http://127.0.0.1:9/rag", 2, ""},
		{"chat", 0, "want task=backend"},
		{"sing=llm", 0, "unknown task"},
		{"chat=llm,chat=llm", 0, "bound twice"},
		{"chat=llm:x", 0, "takes no argument"},
		{"tool=exec:", 0, "exec needs a command"},
		{"rag=http:ftp://x", 0, "absolute http(s) URL"},
		{"rag=grpc:x", 0, "unknown backend"},
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			b, err := ParseTasks(tc.spec)
			if tc.wantErr != "" {
				if err == nil || !contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || len(b) != tc.want {
				t.Fatalf("got %v, %v; want %d bindings", b, err, tc.want)
			}
		})
	}
}

func TestNewRegistry(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		want    []string
		wantErr string
	}{
		{"nothing configured", Config{}, nil, ""},
		{"llm by default", Config{LLMBaseURL: "http://127.0.0.1:1"}, []string{"chat=llm", "code=llm", "embed=llm", "plan=llm"}, ""},
		{"explicit list replaces the default", Config{LLMBaseURL: "http://x", Tasks: "chat=llm,tool=exec:sh"}, []string{"chat=llm", "tool=exec"}, ""},
		{"llm without base url", Config{Tasks: "chat=llm"}, nil, "EUTERPE_LLM_BASE_URL is empty"},
		{"missing program", Config{Tasks: "tool=exec:/nonexistent/prog"}, nil, "tool"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(tc.cfg, nil)
			if tc.wantErr != "" {
				var se *daemon.SettingError
				if !errors.As(err, &se) || se.Setting != "EUTERPE_TASK_BACKENDS" || !contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want SettingError containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := r.Describe()
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestRegistryTaskNotConfigured(t *testing.T) {
	r, err := New(Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Run(context.Background(), Request{JobID: "j", Task: "rag", Payload: []byte(`{}`)}, nil)
	var be *Error
	if !errors.As(err, &be) || be.Code != CodeTaskNotConfigured {
		t.Fatalf("err = %v, want %s", err, CodeTaskNotConfigured)
	}
}

func TestRegisterSettings(t *testing.T) {
	env := map[string]string{
		"EUTERPE_LLM_BASE_URL":  "http://127.0.0.1:8080",
		"EUTERPE_LLM_API_KEY":   "sk-secret",
		"EUTERPE_TASK_BACKENDS": "chat=llm,rag=http:https://rag.local/q",
	}
	var b Config
	c := daemon.NewConfig("test", func(k string) string { return env[k] })
	b.Register(c)
	if err := c.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if b.LLMAPIKey != "sk-secret" || b.Tasks != env["EUTERPE_TASK_BACKENDS"] {
		t.Fatalf("settings not applied: %+v", b)
	}
	env["EUTERPE_TASK_BACKENDS"] = "chat=bogus"
	c = daemon.NewConfig("test", func(k string) string { return env[k] })
	b.Register(c)
	var se *daemon.SettingError
	if err := c.Parse(nil); !errors.As(err, &se) || se.Setting != "EUTERPE_TASK_BACKENDS" {
		t.Fatalf("err = %v, want SettingError on EUTERPE_TASK_BACKENDS", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// An http backend's URL may carry a password; a startup error about any
// entry of the list must not print it.
func TestTaskBackendsErrorsRedactURLPassword(t *testing.T) {
	const pw = "hunter2-in-url"
	tests := []struct {
		name string
		cfg  Config
	}{
		{"missing program beside it", Config{Tasks: "rag=http:http://u:" + pw + "@127.0.0.1:9/rag,tool=exec:/nonexistent/prog"}},
		{"llm without base url beside it", Config{Tasks: "rag=http:http://u:" + pw + "@127.0.0.1:9/rag,chat=llm"}},
		{"bad entry itself", Config{Tasks: "rag=http:ftp://u:" + pw + "@127.0.0.1:9/rag"}},
		{"bound twice", Config{Tasks: "rag=http:http://u:" + pw + "@127.0.0.1:9/rag,rag=llm"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg, nil)
			if err == nil {
				t.Fatal("no error")
			}
			if strings.Contains(err.Error(), pw) {
				t.Fatalf("password in %q", err)
			}
			if _, perr := ParseTasks(tc.cfg.Tasks); perr != nil && strings.Contains(perr.Error(), pw) {
				t.Fatalf("password in %q", perr)
			}
		})
	}
}
