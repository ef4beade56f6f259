// Command benchtable reads `go test -bench` output on stdin and prints one
// table per package: a row per benchmark, a column per reported metric, so
// throughput, latency percentiles and memory figures can be read side by side.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

type row struct {
	name    string
	metrics map[string]string
}

type table struct {
	pkg   string
	rows  []row
	units []string
	seen  map[string]bool
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	var tables []*table
	var cur *table
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(os.Stderr, line) // keep the raw output visible
		switch {
		case strings.HasPrefix(line, "pkg: "):
			// Several runs of one package (different -benchtime) share a table.
			pkg := strings.TrimPrefix(line, "pkg: ")
			cur = nil
			for _, t := range tables {
				if t.pkg == pkg {
					cur = t
				}
			}
			if cur == nil {
				cur = &table{pkg: pkg, seen: map[string]bool{}}
				tables = append(tables, cur)
			}
		case strings.HasPrefix(line, "Benchmark") && cur != nil:
			if r, ok := parse(line); ok {
				for u := range r.metrics {
					if !cur.seen[u] {
						cur.seen[u] = true
						cur.units = append(cur.units, u)
					}
				}
				cur.rows = append(cur.rows, r)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	for _, t := range tables {
		if len(t.rows) == 0 {
			continue
		}
		sort.SliceStable(t.units, func(i, j int) bool { return rank(t.units[i]) < rank(t.units[j]) })
		fmt.Fprintf(out, "\n### %s\n\n| benchmark |", t.pkg)
		for _, u := range t.units {
			fmt.Fprintf(out, " %s |", u)
		}
		fmt.Fprint(out, "\n|---|")
		for range t.units {
			fmt.Fprint(out, "---:|")
		}
		fmt.Fprintln(out)
		for _, r := range t.rows {
			fmt.Fprintf(out, "| %s |", r.name)
			for _, u := range t.units {
				v := r.metrics[u]
				if v == "" {
					v = "–"
				}
				fmt.Fprintf(out, " %s |", v)
			}
			fmt.Fprintln(out)
		}
	}
	return nil
}

// parse reads "BenchmarkName-2  N  v1 unit1  v2 unit2 ...".
func parse(line string) (row, bool) {
	f := strings.Fields(line)
	if len(f) < 4 {
		return row{}, false
	}
	name := strings.TrimPrefix(f[0], "Benchmark")
	if i := strings.LastIndex(name, "-"); i > 0 {
		name = name[:i]
	}
	r := row{name: name, metrics: map[string]string{}}
	for i := 2; i+1 < len(f); i += 2 {
		r.metrics[f[i+1]] = f[i]
	}
	return r, true
}

// rank puts the figures people look for first ahead of Go's defaults.
func rank(unit string) int {
	switch unit {
	case "ns/op", "B/op", "allocs/op":
		return 2
	}
	return 1
}
