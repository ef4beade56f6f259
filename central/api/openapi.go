package api

import (
	_ "embed"
	"encoding/json"
	"fmt"
)

// OpenAPI is the OpenAPI 3.1 description of the transcode API. The document
// served at /openapi.json is this one merged with the fragments of the
// other roles' routes (Merge).
//
//go:embed openapi.json
var OpenAPI []byte

// Merge returns base with the paths, component schemas and security schemes
// of each fragment added. A fragment is an OpenAPI document holding only
// those parts; defining a path or a schema twice is an error, so two
// packages can never silently document the same route differently.
func Merge(base []byte, fragments ...[]byte) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(base, &doc); err != nil {
		return nil, fmt.Errorf("openapi: base: %w", err)
	}
	for i, f := range fragments {
		var frag map[string]any
		if err := json.Unmarshal(f, &frag); err != nil {
			return nil, fmt.Errorf("openapi: fragment %d: %w", i, err)
		}
		if err := mergeInto(doc, frag, "paths"); err != nil {
			return nil, fmt.Errorf("openapi: fragment %d: %w", i, err)
		}
		comps, _ := frag["components"].(map[string]any)
		docComps, _ := doc["components"].(map[string]any)
		if docComps == nil {
			docComps = map[string]any{}
			doc["components"] = docComps
		}
		for _, part := range []string{"schemas", "securitySchemes"} {
			if err := mergeInto(docComps, comps, part); err != nil {
				return nil, fmt.Errorf("openapi: fragment %d: components: %w", i, err)
			}
		}
	}
	return json.MarshalIndent(doc, "", "  ")
}

func mergeInto(dst, src map[string]any, key string) error {
	add, _ := src[key].(map[string]any)
	if len(add) == 0 {
		return nil
	}
	have, _ := dst[key].(map[string]any)
	if have == nil {
		have = map[string]any{}
		dst[key] = have
	}
	for k, v := range add {
		if _, dup := have[k]; dup {
			return fmt.Errorf("%s %q is defined twice", key, k)
		}
		have[k] = v
	}
	return nil
}
