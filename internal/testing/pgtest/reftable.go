package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
)

// RefTable creates schema.table(column), the names quoted, through pool, and
// returns it as a GC liveness source with a setter that adds or removes a
// key's reference: the reference table a GC test owns.
func RefTable(t testing.TB, pool *pgxpool.Pool, schema, table, column string) (gc.Source, func(blob.Key, bool)) {
	t.Helper()
	ident := pgx.Identifier{schema, table}.Sanitize()
	col := pgx.Identifier{column}.Sanitize()
	if _, err := pool.Exec(context.Background(), "CREATE TABLE "+ident+" ("+col+" text NOT NULL)"); err != nil {
		t.Fatalf("pgtest: creating reference table: %v", err)
	}
	set := func(key blob.Key, referenced bool) {
		t.Helper()
		stmt := "DELETE FROM " + ident + " WHERE " + col + " = $1"
		if referenced {
			stmt = "INSERT INTO " + ident + " (" + col + ") VALUES ($1)"
		}
		if _, err := pool.Exec(context.Background(), stmt, key.String()); err != nil {
			t.Fatalf("pgtest: setting a reference: %v", err)
		}
	}
	return gc.Source{Schema: schema, Table: table, Column: column}, set
}
