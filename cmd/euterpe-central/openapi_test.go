package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/central/api"
	"github.com/vesta-cx/euterpe/central/pipeline"
	"github.com/vesta-cx/euterpe/sync/ingest"
)

// The document /openapi.json serves is the transcode API's merged with
// every role's fragment: it must merge, every security requirement must
// name a scheme the document defines, and every $ref must resolve.
func TestComposedOpenAPIIsSelfContained(t *testing.T) {
	doc, err := api.Merge(api.OpenAPI, pipeline.OpenAPI(), (&ingest.Role{}).OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas         map[string]json.RawMessage `json:"schemas"`
			SecuritySchemes map[string]json.RawMessage `json:"securitySchemes"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/transcode", "/v1/pipeline/jobs", "/v1/edges", "/sync/v1/batches"} {
		if d.Paths[p] == nil {
			t.Errorf("composed document lacks %s", p)
		}
	}
	for path, ops := range d.Paths {
		for method, raw := range ops {
			var op struct {
				Security []map[string][]string `json:"security"`
			}
			_ = json.Unmarshal(raw, &op)
			for _, req := range op.Security {
				for name := range req {
					if d.Components.SecuritySchemes[name] == nil {
						t.Errorf("%s %s requires security scheme %q, which is not defined", method, path, name)
					}
				}
			}
		}
	}
	for _, m := range regexp.MustCompile(`"\$ref":\s*"([^"]+)"`).FindAllStringSubmatch(string(doc), -1) {
		name, ok := strings.CutPrefix(m[1], "#/components/schemas/")
		if !ok || d.Components.Schemas[name] == nil {
			t.Errorf("unresolved $ref %s", m[1])
		}
	}
}
