package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestMigrated checks the pool: a schema comes back to the next test with
// the rows and sequences migrate left and nothing a test added, and one
// whose definition a test changed is dropped, not handed on.
func TestMigrated(t *testing.T) {
	migrations := 0
	migrate := func(ctx context.Context, d *DB) error {
		migrations++
		q := pgx.Identifier{d.Schema}.Sanitize()
		_, err := d.Admin.Exec(ctx, `CREATE SCHEMA `+q+`;
CREATE TABLE `+q+`.parent (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, name text NOT NULL, data bytea);
CREATE TABLE `+q+`.child (parent bigint NOT NULL REFERENCES `+q+`.parent (id));
CREATE SEQUENCE `+q+`.counter;
INSERT INTO `+q+`.parent (name, data) VALUES ('seed', '\xdead');
INSERT INTO `+q+`.child VALUES (1)`)
		return err
	}
	kind := "pgtest " + t.Name()
	var first string
	t.Run("dirties", func(t *testing.T) {
		d := Migrated(t, kind, false, migrate)
		first = d.Schema
		q := pgx.Identifier{d.Schema}.Sanitize()
		if _, err := d.Admin.Exec(t.Context(), `INSERT INTO `+q+`.parent (name) VALUES ('added'); SELECT nextval('`+q+`.counter'); DELETE FROM `+q+`.child`); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("reuses", func(t *testing.T) {
		d := Migrated(t, kind, false, migrate)
		if d.Schema != first || migrations != 1 {
			t.Fatalf("schema %s after %s, %d migrations: not recycled", d.Schema, first, migrations)
		}
		q := pgx.Identifier{d.Schema}.Sanitize()
		var names string
		var data []byte
		var children, next int64
		err := d.Admin.QueryRow(t.Context(), `SELECT string_agg(name, ','), (SELECT data FROM `+q+`.parent WHERE id = 1),
	(SELECT count(*) FROM `+q+`.child), nextval('`+q+`.counter') FROM `+q+`.parent`).Scan(&names, &data, &children, &next)
		if err != nil {
			t.Fatal(err)
		}
		if names != "seed" || string(data) != "\xde\xad" || children != 1 || next != 1 {
			t.Fatalf("recycled schema holds %q, %x, %d children, counter at %d; want seed, dead, 1, 1", names, data, children, next)
		}
		if _, err := d.Admin.Exec(t.Context(), `ALTER TABLE `+q+`.parent ADD COLUMN extra int`); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("altered is dropped", func(t *testing.T) {
		d := Migrated(t, kind, false, migrate)
		if d.Schema == first || migrations != 2 {
			t.Fatalf("schema %s (first %s) after %d migrations: an altered schema was handed on", d.Schema, first, migrations)
		}
		var exists bool
		if err := d.Admin.QueryRow(t.Context(), `SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)`, first).Scan(&exists); err != nil || exists {
			t.Fatalf("altered schema %s still exists (%v)", first, err)
		}
	})
}
