package sqldb

import "strings"

// SQLiteTableInfo is a query of the given columns of pragma_table_info
// (name, type, notnull, …) for table, bare or qualified by its schema
// ("main.jobs"), and its arguments: the pragma finds no table named
// "schema.table", the schema is an argument of its own.
func SQLiteTableInfo(columns, table string) (string, []any) {
	if schema, name, ok := strings.Cut(table, "."); ok {
		return "SELECT " + columns + " FROM pragma_table_info(?, ?)", []any{name, schema}
	}
	return "SELECT " + columns + " FROM pragma_table_info(?)", []any{table}
}
