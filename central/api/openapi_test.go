package api_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/vesta-cx/euterpe/central/api"
	"github.com/vesta-cx/euterpe/central/credentials"
	"github.com/vesta-cx/euterpe/central/inbox"
	"github.com/vesta-cx/euterpe/daemon/sqldb"
	"github.com/vesta-cx/euterpe/daemon/sqldb/sqltest"
)

type schemaDoc struct {
	OpenAPI string `json:"openapi"`
	Paths   map[string]map[string]struct {
		Responses map[string]any `json:"responses"`
	} `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]any   `json:"properties"`
			Required   []string         `json:"required"`
			OneOf      []map[string]any `json:"oneOf"`
		} `json:"schemas"`
	} `json:"components"`
}

// The served document covers every endpoint with every status code it
// returns, every route api.Mount adds is documented (and nothing else is),
// and its schemas list exactly the JSON fields of the Go types.
func TestOpenAPIDocument(t *testing.T) {
	var doc schemaDoc
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	want := map[string]map[string][]string{
		"/transcode":             {"post": {"202", "400", "401", "409", "413", "503"}},
		"/transcode/status":      {"get": {"200", "400", "401", "404", "410", "503"}},
		"/transcode/credentials": {"put": {"200", "400", "401", "404", "409", "413", "503"}},
	}
	for path, methods := range want {
		for m, codes := range methods {
			op, ok := doc.Paths[path][m]
			if !ok {
				t.Fatalf("%s %s undocumented", m, path)
			}
			for _, c := range codes {
				if _, ok := op.Responses[c]; !ok {
					t.Errorf("%s %s: response %s undocumented", m, path, c)
				}
			}
			// Nor does it promise one the route never answers (another
			// requester's job is a 404, not a 403).
			for c := range op.Responses {
				if !slices.Contains(codes, c) {
					t.Errorf("%s %s: response %s documented but never returned", m, path, c)
				}
			}
		}
	}
	// Every mounted route is documented, and every documented one mounted.
	e := echo.New()
	api.New(api.Config{}).Mount(e)
	mounted := map[string]bool{}
	for _, r := range e.Routes() {
		if strings.HasPrefix(r.Path, "/*") || r.Method == echo.RouteNotFound {
			continue // echo's own not-found routes
		}
		key := strings.ToLower(r.Method) + " " + r.Path
		mounted[key] = true
		if _, ok := doc.Paths[r.Path][strings.ToLower(r.Method)]; !ok {
			t.Errorf("route %s %s is mounted but not in openapi.json", r.Method, r.Path)
		}
	}
	if len(mounted) < 4 {
		t.Fatalf("only %d routes mounted: %v", len(mounted), mounted)
	}
	for path, ops := range doc.Paths {
		for m := range ops {
			if !mounted[m+" "+path] {
				t.Errorf("openapi.json documents %s %s, which is not mounted", m, path)
			}
		}
	}
	check := func(name string, typ reflect.Type, props map[string]any) {
		t.Helper()
		fields := jsonFields(typ)
		for _, f := range fields {
			if _, ok := props[f]; !ok {
				t.Errorf("schema %s lacks field %s", name, f)
			}
		}
		for p := range props {
			found := false
			for _, f := range fields {
				found = found || f == p
			}
			if !found {
				t.Errorf("schema %s documents %s, which %s does not have", name, p, typ)
			}
		}
	}
	s := doc.Components.Schemas
	check("TranscodeRequest", reflect.TypeOf(api.TranscodeRequest{}), s["TranscodeRequest"].Properties)
	check("Output", reflect.TypeOf(api.OutputRequest{}), s["Output"].Properties)
	check("Rendition", reflect.TypeOf(inbox.Rendition{}), s["Rendition"].Properties)
	check("S3Credentials", reflect.TypeOf(credentials.S3{}), s["S3Credentials"].Properties)
	check("OutputFile", reflect.TypeOf(inbox.OutputFile{}), s["OutputFile"].Properties)
	check("JobStatus", reflect.TypeOf(inbox.View{}), s["JobStatus"].Properties)
	check("Accepted", reflect.TypeOf(api.Accepted{}), s["Accepted"].Properties)
	src := map[string]any{}
	for _, alt := range s["Source"].OneOf {
		for k, v := range alt["properties"].(map[string]any) {
			src[k] = v
		}
	}
	check("Source", reflect.TypeOf(api.SourceRequest{}), src)
	creds := reflect.TypeOf(api.CredentialsRequest{})
	check("CredentialsRequest", creds, s["CredentialsRequest"].Properties)
	credSrc := map[string]any{}
	for _, alt := range s["CredentialsRequest"].Properties["source"].(map[string]any)["oneOf"].([]any) {
		for k, v := range alt.(map[string]any)["properties"].(map[string]any) {
			credSrc[k] = v
		}
	}
	field := func(name string) reflect.Type { f, _ := creds.FieldByName(name); return f.Type.Elem() }
	check("CredentialsRequest.source", field("Source"), credSrc)
	check("CredentialsRequest.output", field("Output"),
		s["CredentialsRequest"].Properties["output"].(map[string]any)["properties"].(map[string]any))
	check("CredentialsUpdated", reflect.TypeOf(api.CredentialsUpdated{}), s["CredentialsUpdated"].Properties)
}

func TestOpenAPIServed(t *testing.T) {
	e := start(t, sqltest.Open(t, sqldb.SQLite))
	res, err := http.Get(e.url + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var v map[string]any
	if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&v) != nil || v["openapi"] == nil {
		t.Fatalf("GET /openapi.json: %d", res.StatusCode)
	}
}

func jsonFields(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && tag == "" {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}
