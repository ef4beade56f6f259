package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestJobPaginationSharedTimestampsUnderInserts(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	fixed := time.UnixMilli(1_700_000_000_000)
	s.Now = func() time.Time { return fixed }
	insert := func() {
		mustExec(t, s.DB, `INSERT INTO jobs(kind,status,created_at,updated_at) VALUES ('delete','completed',?,?)`, s.NowMS(), s.NowMS())
	}
	for i := 0; i < 300; i++ {
		insert()
	}
	var before []int64
	rows, _ := s.DB.Query(`SELECT id FROM jobs`)
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		before = append(before, id)
	}
	rows.Close()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				insert()
			}
		}
	}()
	seen := map[int64]bool{}
	var cursor int64
	var prev *Job
	for pages := 0; ; pages++ {
		jobs, next, err := s.ListJobs(ctx, cursor, 7)
		if err != nil {
			t.Fatal(err)
		}
		for i := range jobs {
			j := jobs[i]
			if seen[j.ID] {
				t.Fatalf("job %d returned twice", j.ID)
			}
			seen[j.ID] = true
			if prev != nil && (j.CreatedAt > prev.CreatedAt || j.CreatedAt == prev.CreatedAt && j.ID >= prev.ID) {
				t.Fatalf("order broken: %d after %d", j.ID, prev.ID)
			}
			prev = &j
		}
		if next == 0 {
			break
		}
		cursor = next
	}
	close(stop)
	wg.Wait()
	for _, id := range before {
		if !seen[id] {
			t.Fatalf("gap: job %d never returned", id)
		}
	}
}

func TestJobCursorUnknownAnchor(t *testing.T) {
	s := openTest(t)
	if _, _, err := s.ListJobs(context.Background(), 999, 10); !errors.Is(err, ErrBadCursor) {
		t.Fatalf("err = %v, want ErrBadCursor", err)
	}
}

func hexOf(i int) string {
	h := sha256.Sum256([]byte(fmt.Sprint(i)))
	return hex.EncodeToString(h[:])
}

// referenceGroups is §6.2 computed directly from library_files.
func referenceGroups(t *testing.T, s *Store) []Group {
	rows, err := s.DB.Query(`SELECT hash_algorithm, content_hash, COUNT(*) AS fc, SUM(size_bytes) AS ts FROM library_files
WHERE is_missing = 0 AND needs_hash = 0 AND hash_algorithm IS NOT NULL AND content_hash IS NOT NULL
GROUP BY hash_algorithm, content_hash HAVING COUNT(*) > 1
ORDER BY fc DESC, ts DESC, hash_algorithm ASC, content_hash ASC`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []Group
	for rows.Next() {
		var g Group
		rows.Scan(&g.HashAlgorithm, &g.ContentHashHex, &g.FileCount, &g.TotalSizeBytes)
		g.GroupKey = g.HashAlgorithm + ":" + g.ContentHashHex
		out = append(out, g)
	}
	return out
}

func TestGroupPaginationMatchesSpecOrder(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	id := 0
	add := func(algo, h string, size int64, missing, needs int) {
		id++
		mustExec(t, s.DB, `INSERT INTO library_files(path, size_bytes, is_missing, needs_hash, hash_algorithm, content_hash)
VALUES (?, ?, ?, ?, ?, ?)`, fmt.Sprintf("/lib/%d", id), size, missing, needs, algo, h)
	}
	// Many ties on file_count and total size, both algorithms.
	for g := 0; g < 40; g++ {
		algo := []string{AlgoBLAKE3, AlgoSHA256}[g%2]
		for c := 0; c < 2+g%3; c++ {
			add(algo, hexOf(g), int64(100*(g%4)), 0, 0)
		}
		add(algo, hexOf(g), 5, 1, 0) // missing: excluded
		add(algo, hexOf(g), 5, 0, 1) // needs hash: excluded
	}
	add(AlgoBLAKE3, hexOf(999), 1, 0, 0) // singleton: excluded
	// Move a file between groups and mark one missing: triggers keep up.
	mustExec(t, s.DB, `UPDATE library_files SET content_hash = ? WHERE id = 1`, hexOf(5))
	mustExec(t, s.DB, `UPDATE library_files SET is_missing = 1 WHERE id = 10`)
	mustExec(t, s.DB, `DELETE FROM library_files WHERE id = 20`)

	want := referenceGroups(t, s)
	var got []Group
	var cursor *GroupCursor
	for {
		page, next, err := s.ListGroups(ctx, cursor, 3)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page...)
		if next == nil {
			break
		}
		c, err := DecodeGroupCursor(next.Encode())
		if err != nil {
			t.Fatal(err)
		}
		cursor = &c
	}
	if len(got) != len(want) {
		t.Fatalf("%d groups paged, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("group %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	// Files of one group page by id without duplicates.
	k, _ := ParseGroupKey(want[0].GroupKey)
	var ids []int64
	var after int64
	for {
		files, next, err := s.GroupFiles(ctx, k, after, 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			ids = append(ids, f.ID)
		}
		if next == 0 {
			break
		}
		after = next
	}
	if int64(len(ids)) != want[0].FileCount {
		t.Fatalf("group files %v, want %d", ids, want[0].FileCount)
	}
}

func TestParseGroupKey(t *testing.T) {
	good := "sha256:" + hexOf(1)
	cases := []struct {
		in string
		ok bool
	}{
		{good, true},
		{"blake3:" + hexOf(2), true},
		{"BLAKE3:" + hexOf(2), false},
		{"md5:" + hexOf(1)[:32], false},
		{"sha256:" + hexOf(1)[:63], false},
		{"sha256:" + hexOf(1) + "0", false},
		{"sha256:" + hexOf(1)[:63] + "g", false},
		{"sha256" + hexOf(1), false},
		{"", false},
	}
	for _, c := range cases {
		_, err := ParseGroupKey(c.in)
		if (err == nil) != c.ok {
			t.Errorf("ParseGroupKey(%q) err=%v", c.in, err)
		}
		if err != nil && !errors.Is(err, ErrBadGroupKey) {
			t.Errorf("error does not match ErrBadGroupKey: %v", err)
		}
	}
}

func TestDecodeGroupCursor(t *testing.T) {
	good := GroupCursor{FileCount: 3, TotalSizeBytes: 10, HashAlgorithm: AlgoBLAKE3, ContentHashHex: hexOf(1)}
	if c, err := DecodeGroupCursor(good.Encode()); err != nil || c != good {
		t.Fatalf("round trip: %+v %v", c, err)
	}
	bad := []string{"!!", "e30", // {}
		GroupCursor{FileCount: 1, TotalSizeBytes: 1, HashAlgorithm: AlgoBLAKE3, ContentHashHex: hexOf(1)}.Encode(),
		GroupCursor{FileCount: 2, TotalSizeBytes: 1, HashAlgorithm: "md5", ContentHashHex: hexOf(1)}.Encode(),
		"eyJmaWxlX2NvdW50IjoiMiJ9", // {"file_count":"2"}
		// values beyond the sort key's range would make its numeric part
		// negative and restart the listing at page 1
		GroupCursor{FileCount: 2, TotalSizeBytes: math.MaxInt64, HashAlgorithm: AlgoBLAKE3, ContentHashHex: hexOf(1)}.Encode(),
		GroupCursor{FileCount: 2, TotalSizeBytes: sortKeyBase + 1, HashAlgorithm: AlgoBLAKE3, ContentHashHex: hexOf(1)}.Encode(),
		GroupCursor{FileCount: math.MaxInt64, TotalSizeBytes: 1, HashAlgorithm: AlgoBLAKE3, ContentHashHex: hexOf(1)}.Encode(),
	}
	for _, b := range bad {
		if _, err := DecodeGroupCursor(b); !errors.Is(err, ErrBadCursor) {
			t.Errorf("DecodeGroupCursor(%q) = %v, want ErrBadCursor", b, err)
		}
	}
	for _, b := range []string{"0", "-1", "abc", "1e3", "99999999999999999999"} {
		if _, err := DecodeIDCursor(b); !errors.Is(err, ErrBadCursor) {
			t.Errorf("DecodeIDCursor(%q) = %v", b, err)
		}
	}
}

func FuzzDecodeGroupCursor(f *testing.F) {
	f.Add(GroupCursor{FileCount: 3, TotalSizeBytes: 10, HashAlgorithm: AlgoBLAKE3, ContentHashHex: hexOf(1)}.Encode())
	f.Add("e30")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := DecodeGroupCursor(s)
		if err != nil {
			if !errors.Is(err, ErrBadCursor) {
				t.Fatalf("error %v does not match ErrBadCursor", err)
			}
			return
		}
		// Its sort key is in range: both numeric parts are 19 digits.
		if k := SortKey(c.FileCount, c.TotalSizeBytes, c.HashAlgorithm, c.ContentHashHex); strings.Contains(k[:38], "-") {
			t.Fatalf("cursor %+v gives sort key %s", c, k)
		}
		// A decoded cursor re-encodes to one that decodes to the same value.
		c2, err := DecodeGroupCursor(c.Encode())
		if err != nil || c2 != c {
			t.Fatalf("re-decode %+v: %+v %v", c, c2, err)
		}
	})
}

func FuzzDecodeIDCursor(f *testing.F) {
	for _, s := range []string{"1", "0", "-1", "18446744073709551616", "007"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := DecodeIDCursor(s)
		if err != nil {
			if !errors.Is(err, ErrBadCursor) {
				t.Fatal(err)
			}
			return
		}
		if n <= 0 {
			t.Fatalf("accepted non-positive %d", n)
		}
	})
}

func FuzzParseGroupKey(f *testing.F) {
	f.Add("sha256:" + hexOf(1))
	f.Add("blake3:" + hexOf(1))
	f.Add("blake3:zz")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseGroupKey(s)
		if err != nil {
			if !errors.Is(err, ErrBadGroupKey) {
				t.Fatal(err)
			}
			return
		}
		if len(k.HashHex) != DigestHexLen[k.Algorithm] {
			t.Fatalf("accepted %q with digest length %d", s, len(k.HashHex))
		}
		if k2, err := ParseGroupKey(k.String()); err != nil || k2 != k {
			t.Fatalf("round trip %q: %+v %v", s, k2, err)
		}
	})
}
