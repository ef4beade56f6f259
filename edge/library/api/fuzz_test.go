package api_test

import (
	"strings"
	"testing"

	"github.com/vesta-cx/euterpe/daemon/testsvc"
)

// FuzzDeleteBody: POST …/duplicates/groups/{key}/delete with any body is
// answered below 500 and never panics. The library is empty, so a body
// that decodes and validates ends in 404: the decoder and the request
// checks are what this reaches.
func FuzzDeleteBody(f *testing.F) {
	s := start(f)
	key := "blake3:" + strings.Repeat("a", 64)
	for _, seed := range []string{`{"keep_file_ids":[1],"delete_file_ids":[2]}`, `{"keep_file_ids":[1,2],"delete_file_ids":[3],"reason":"x"}`,
		`{"keep_file_ids":[],"delete_file_ids":[1]}`, `{"keep_file_ids":[1],"delete_file_ids":[1]}`, `{}`, `[]`, `{"keep_file_ids":[-1]}`, "\xff"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if err := testsvc.PostNo5xx(t, s.base+"/api/v1/duplicates/groups/"+key+"/delete", nil, body); err != nil {
			t.Fatal(err)
		}
	})
}
