package api_test

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

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

// The served document covers both endpoints with every status code they
// return, and its schemas list exactly the JSON fields of the Go types.
func TestOpenAPIDocument(t *testing.T) {
	var doc schemaDoc
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	want := map[string]map[string][]string{
		"/transcode":        {"post": {"202", "400", "401", "409", "413"}},
		"/transcode/status": {"get": {"200", "400", "401", "403", "404", "410"}},
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
