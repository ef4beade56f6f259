package console_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every metric the Grafana dashboard queries is one central's code
// registers (by its exact name, histograms by their family).
func TestGrafanaDashboardMetrics(t *testing.T) {
	root := filepath.Join("..", "..")
	raw, err := os.ReadFile(filepath.Join(root, "deploy", "grafana", "euterpe-central.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	for _, dir := range []string{"central", "sync", "daemon"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			src.Write(b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	code := src.String()
	name := regexp.MustCompile(`euterpe_[a-z0-9_]+`)
	seen := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range name.FindAllString(tg.Expr, -1) {
				family := m
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					family = strings.TrimSuffix(family, suf)
				}
				if !strings.Contains(code, `"`+family+`"`) {
					t.Errorf("the dashboard queries %s, which no code registers", m)
				}
				seen++
			}
		}
	}
	if seen < 20 {
		t.Fatalf("only %d metric references in the dashboard", seen)
	}
}
