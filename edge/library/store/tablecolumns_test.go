package store

import (
	"context"
	"testing"
)

// TestTableColumnsOfAQualifiedName: a table named with its schema
// ("main.library_files"), as any statement may name it, has the columns
// of the bare name: pragma_table_info takes the schema as an argument of
// its own and finds no table called "main.library_files".
func TestTableColumnsOfAQualifiedName(t *testing.T) {
	s := openTest(t)
	for _, name := range []string{"library_files", "main.library_files"} {
		t.Run(name, func(t *testing.T) {
			cols, err := TableColumns(context.Background(), s.DB, name)
			if err != nil {
				t.Fatal(err)
			}
			if !cols["id"] || !cols["content_hash"] {
				t.Fatalf("columns of %s: %v", name, cols)
			}
		})
	}
}
