package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/central/api"
)

func TestMergeAddsFragmentsAndRefusesDuplicates(t *testing.T) {
	frag := []byte(`{"paths":{"/v1/things":{"get":{"responses":{"200":{"description":"ok"}}}}},
		"components":{"schemas":{"Thing":{"type":"object"}},"securitySchemes":{"operator":{"type":"http","scheme":"bearer"}}}}`)
	out, err := api.Merge(api.OpenAPI, frag)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths      map[string]any `json:"paths"`
		Components struct {
			Schemas         map[string]any `json:"schemas"`
			SecuritySchemes map[string]any `json:"securitySchemes"`
		} `json:"components"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/transcode", "/v1/things"} {
		if doc.Paths[p] == nil {
			t.Errorf("merged document lacks %s", p)
		}
	}
	if doc.Components.Schemas["Thing"] == nil || doc.Components.Schemas["TranscodeRequest"] == nil || doc.Components.SecuritySchemes["operator"] == nil {
		t.Error("merged document lacks a schema or security scheme")
	}
	cases := map[string]string{
		"duplicate path":   `{"paths":{"/transcode":{}}}`,
		"duplicate schema": `{"components":{"schemas":{"TranscodeRequest":{}}}}`,
		"not json":         `{`,
	}
	for name, f := range cases {
		if _, err := api.Merge(api.OpenAPI, []byte(f)); err == nil {
			t.Errorf("%s: merged", name)
		} else if name != "not json" && !strings.Contains(err.Error(), "twice") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
