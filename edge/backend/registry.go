package backend

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/vesta-cx/euterpe/daemon"
)

// Tasks are the task names the streams contract defines.
var Tasks = []string{"chat", "plan", "code", "tool", "rag", "embed"}

// llmTasks get the LLM backend by default when EUTERPE_LLM_BASE_URL is set
// and EUTERPE_TASK_BACKENDS is empty.
var llmTasks = []string{"chat", "plan", "code", "embed"}

// Config holds the backend settings; Register binds them to a daemon.Config.
type Config struct {
	LLMBaseURL string
	LLMModel   string
	LLMAPIKey  string
	LLMTimeout time.Duration
	// LLMMaxText caps the streamed text of one chat job in bytes.
	LLMMaxText int
	// Tasks maps tasks to backends: "chat=llm,embed=llm,tool=exec:/usr/bin/x
	// --flag,rag=http:http://127.0.0.1:9000/rag". Empty means llm for chat,
	// plan, code and embed when LLMBaseURL is set, and nothing otherwise.
	Tasks string
	// Timeout bounds one exec or http backend call.
	Timeout time.Duration
}

// Register declares the backend settings on c.
func (b *Config) Register(c *daemon.Config) {
	c.String(&b.LLMBaseURL, "llm-base-url", "EUTERPE_LLM_BASE_URL", "",
		"base URL of an OpenAI-compatible server (llama.cpp, Ollama, vLLM), e.g. http://127.0.0.1:8080",
		daemon.CheckURL("http", "https"))
	c.String(&b.LLMModel, "llm-model", "EUTERPE_LLM_MODEL", "",
		"model name sent when a payload names none", nil)
	c.String(&b.LLMAPIKey, "llm-api-key", "EUTERPE_LLM_API_KEY", "",
		"bearer token for the LLM server", nil, daemon.Secret())
	c.Duration(&b.LLMTimeout, "llm-timeout", "EUTERPE_LLM_TIMEOUT", 10*time.Minute, time.Second, 24*time.Hour,
		"longest one LLM call may take")
	c.Int(&b.LLMMaxText, "llm-max-text-bytes", "EUTERPE_LLM_MAX_TEXT_BYTES", DefaultLLMMaxText, 1024, 64<<20,
		"longest streamed answer of one chat job, in bytes (result_too_large above)")
	c.String(&b.Tasks, "task-backends", "EUTERPE_TASK_BACKENDS", "",
		"task=backend list: llm, exec:<command> or http:<url>, e.g. chat=llm,tool=exec:/usr/local/bin/tool,rag=http:http://127.0.0.1:9000/rag",
		func(v string) error { _, err := ParseTasks(v); return err })
	c.Duration(&b.Timeout, "backend-timeout", "EUTERPE_BACKEND_TIMEOUT", time.Minute, 100*time.Millisecond, 24*time.Hour,
		"longest one exec or http backend call may take")
}

// Binding is one parsed entry of EUTERPE_TASK_BACKENDS.
type Binding struct {
	Task string
	Kind string // llm, exec, http
	Arg  string // command line for exec, URL for http
}

// ParseTasks parses a task=backend list. It checks syntax only; New checks
// that programs exist and that llm has a base URL.
func ParseTasks(spec string) ([]Binding, error) {
	var out []Binding
	seen := map[string]bool{}
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		// An http URL may carry a password: every message shows the
		// entry without it.
		shown := daemon.RedactURL(part)
		task, be, ok := strings.Cut(part, "=")
		task, be = strings.TrimSpace(task), strings.TrimSpace(be)
		if !ok || be == "" {
			return nil, fmt.Errorf("entry %q: want task=backend", shown)
		}
		if !known(task) {
			return nil, fmt.Errorf("entry %q: unknown task %q (want one of %s)", shown, task, strings.Join(Tasks, ", "))
		}
		if seen[task] {
			return nil, fmt.Errorf("task %q bound twice", task)
		}
		seen[task] = true
		kind, arg, _ := strings.Cut(be, ":")
		arg = strings.TrimSpace(arg)
		switch kind {
		case "llm":
			if arg != "" {
				return nil, fmt.Errorf("entry %q: llm takes no argument", shown)
			}
		case "exec":
			if len(strings.Fields(arg)) == 0 {
				return nil, fmt.Errorf("entry %q: exec needs a command, e.g. exec:/usr/local/bin/tool", shown)
			}
		case "http":
			if u, err := url.Parse(arg); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, fmt.Errorf("entry %q: http needs an absolute http(s) URL", shown)
			}
		default:
			return nil, fmt.Errorf("entry %q: unknown backend %q (want llm, exec:<command> or http:<url>)", shown, kind)
		}
		out = append(out, Binding{Task: task, Kind: kind, Arg: arg})
	}
	return out, nil
}

func known(task string) bool {
	for _, t := range Tasks {
		if t == task {
			return true
		}
	}
	return false
}

// Registry routes each task to its backend.
type Registry struct {
	byTask map[string]Backend
	kinds  map[string]string
}

// NewRegistry returns a registry over explicit backends (tests, benchmarks).
func NewRegistry(byTask map[string]Backend) *Registry {
	r := &Registry{byTask: map[string]Backend{}, kinds: map[string]string{}}
	for t, b := range byTask {
		r.byTask[t] = b
		r.kinds[t] = "custom"
	}
	return r
}

// New builds the registry the settings describe. A binding that cannot work
// (llm without a base URL, a program not found) is a *daemon.SettingError.
func New(cfg Config, client *http.Client) (*Registry, error) {
	client = noRedirects(client)
	bindings, err := ParseTasks(cfg.Tasks)
	if err != nil {
		return nil, &daemon.SettingError{Setting: "EUTERPE_TASK_BACKENDS", Value: daemon.RedactURL(cfg.Tasks), Reason: err.Error()}
	}
	if strings.TrimSpace(cfg.Tasks) == "" && cfg.LLMBaseURL != "" {
		for _, t := range llmTasks {
			bindings = append(bindings, Binding{Task: t, Kind: "llm"})
		}
	}
	r := &Registry{byTask: map[string]Backend{}, kinds: map[string]string{}}
	var llm *LLM
	for _, b := range bindings {
		var be Backend
		switch b.Kind {
		case "llm":
			if cfg.LLMBaseURL == "" {
				return nil, &daemon.SettingError{Setting: "EUTERPE_TASK_BACKENDS", Value: daemon.RedactURL(cfg.Tasks),
					Reason: "task " + b.Task + " uses llm but EUTERPE_LLM_BASE_URL is empty"}
			}
			if llm == nil {
				llm = &LLM{BaseURL: cfg.LLMBaseURL, Model: cfg.LLMModel, APIKey: cfg.LLMAPIKey, Timeout: cfg.LLMTimeout, MaxText: cfg.LLMMaxText, Client: client}
			}
			be = llm
		case "exec":
			argv := strings.Fields(b.Arg)
			path, err := exec.LookPath(argv[0])
			if err != nil {
				return nil, &daemon.SettingError{Setting: "EUTERPE_TASK_BACKENDS", Value: daemon.RedactURL(cfg.Tasks),
					Reason: "task " + b.Task + ": " + err.Error()}
			}
			be = &Exec{Path: path, Args: argv[1:], Timeout: cfg.Timeout}
		case "http":
			be = &HTTP{URL: b.Arg, Timeout: cfg.Timeout, Client: client}
		}
		r.byTask[b.Task] = be
		r.kinds[b.Task] = b.Kind
	}
	return r, nil
}

// Run sends req to its task's backend; a task without one fails with
// task_not_configured.
func (r *Registry) Run(ctx context.Context, req Request, delta Delta) (json.RawMessage, error) {
	b, ok := r.byTask[req.Task]
	if !ok {
		return nil, Errorf(CodeTaskNotConfigured, 0, "no backend is configured for task %q", req.Task)
	}
	return b.Run(ctx, req, delta)
}

// Describe lists "task=kind" for every configured task, for the startup log.
func (r *Registry) Describe() []string {
	out := make([]string, 0, len(r.kinds))
	for t, k := range r.kinds {
		out = append(out, t+"="+k)
	}
	sort.Strings(out)
	return out
}
