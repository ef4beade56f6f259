package store

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"
)

// BenchmarkDuplicateGroupPage measures §6.2 page latency with
// EUTERPE_BENCH_GROUP_ROWS (default 1000000) library_files rows in groups
// of 1 to 4 files, at random cursor positions; reports p50 and p99.
func BenchmarkDuplicateGroupPage(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("EUTERPE_BENCH_GROUP_ROWS")); err == nil && v > 0 {
		n = v
	}
	s := openTest(b)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(3, 4))
	err := s.Tx(ctx, func(tx *sql.Tx) error {
		st, err := tx.Prepare(`INSERT INTO library_files(root, path, size_bytes, mtime_ns, is_missing, needs_hash, hash_algorithm, content_hash)
VALUES ('/lib', ?, ?, 0, 0, 0, 'blake3', ?)`)
		if err != nil {
			return err
		}
		defer st.Close()
		for i, g := 0, 0; i < n; g++ {
			size := r.Int64N(1 << 30)
			h := fmt.Sprintf("%064x", g)
			for c := 0; c < 1+r.IntN(4) && i < n; c++ {
				if _, err := st.Exec(fmt.Sprintf("/lib/%d", i), size, h); err != nil {
					return err
				}
				i++
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	s.DB.Exec(`ANALYZE`)
	// What start-up pays to choose the default hash algorithm.
	start := time.Now()
	if algo, err := s.CatalogAlgorithm(ctx); err != nil || algo != AlgoBLAKE3 {
		b.Fatalf("CatalogAlgorithm = %q, %v", algo, err)
	}
	catalogAlgo := time.Since(start)
	var cursors []*GroupCursor
	rows, _ := s.DB.Query(`SELECT hash_algorithm, content_hash, file_count, total_size_bytes FROM dedup_groups
WHERE file_count > 1 ORDER BY random() LIMIT 1000`)
	for rows.Next() {
		var c GroupCursor
		rows.Scan(&c.HashAlgorithm, &c.ContentHashHex, &c.FileCount, &c.TotalSizeBytes)
		cursors = append(cursors, &c)
	}
	rows.Close()
	cursors = append(cursors, nil)
	b.ResetTimer()
	var lat []time.Duration
	for i := 0; i < b.N; i++ {
		for _, c := range cursors {
			start := time.Now()
			page, _, err := s.ListGroups(ctx, c, 50)
			lat = append(lat, time.Since(start))
			if err != nil || (c == nil && len(page) == 0) {
				b.Fatal(err)
			}
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(float64(n), "rows")
	b.ReportMetric(ms(catalogAlgo), "catalog-algorithm-ms")
}
