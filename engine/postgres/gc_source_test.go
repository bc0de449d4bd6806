package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/steaderr"
)

// A liveness source must be a relation a sweep can read: an index or a
// composite type is refused at registration (else every sweep fails); a
// table, a view and a materialized view are accepted.
func TestRegisterSourceRelationKind(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ddl, name string
		ok        bool
	}{
		{"CREATE TABLE %[1]s.app_refs (k text)", "app_refs", true},
		{"CREATE TABLE %[1]s.app_refs (k text); CREATE VIEW %[1]s.app_refs_v AS SELECT k FROM %[1]s.app_refs", "app_refs_v", true},
		{"CREATE TABLE %[1]s.app_refs (k text); CREATE MATERIALIZED VIEW %[1]s.app_refs_m AS SELECT k FROM %[1]s.app_refs", "app_refs_m", true},
		{"CREATE TABLE %[1]s.app_refs (k text); CREATE INDEX app_refs_k ON %[1]s.app_refs (k)", "app_refs_k", false},
		{"CREATE TYPE %[1]s.app_refs_t AS (k text)", "app_refs_t", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			e := open(t, db, "")
			ctx := context.Background()
			if _, err := e.Pool().Exec(ctx, fmt.Sprintf(tt.ddl, pgxIdent(db.Schema))); err != nil {
				t.Fatal(err)
			}
			col := gc.New(e.GC(), gc.Options{Grace: time.Microsecond, AllUnreferenced: true})
			err := col.RegisterSource(ctx, gc.Source{Schema: db.Schema, Table: tt.name, Column: "k"})
			if tt.ok != (err == nil) || (!tt.ok && !errors.Is(err, steaderr.ErrInvalidArgument)) {
				t.Fatalf("RegisterSource(%s) = %v, want ok=%v or ErrInvalidArgument", tt.name, err, tt.ok)
			}
			if _, err := col.Sweep(ctx, gc.SweepOptions{}); err != nil {
				t.Errorf("sweep after RegisterSource(%s): %v", tt.name, err)
			}
		})
	}
}

// A source table dropped after registration fails the sweep with an error
// that names the missing source, not "schema not initialized".
func TestSweepWithDroppedSource(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e := open(t, db, "")
	ctx := context.Background()
	if _, err := e.Pool().Exec(ctx, "CREATE TABLE "+pgxIdent(db.Schema)+".app_refs (k text)"); err != nil {
		t.Fatal(err)
	}
	col := gc.New(e.GC(), gc.Options{Grace: time.Microsecond})
	if err := col.RegisterSource(ctx, gc.Source{Schema: db.Schema, Table: "app_refs", Column: "k"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Pool().Exec(ctx, "DROP TABLE "+pgxIdent(db.Schema)+".app_refs"); err != nil {
		t.Fatal(err)
	}
	_, err := col.Sweep(ctx, gc.SweepOptions{})
	if err == nil || strings.Contains(err.Error(), "migrate") || !strings.Contains(err.Error(), "liveness source") {
		t.Errorf("sweep with a dropped source = %v, want an error naming the missing liveness source", err)
	}
}

// A source column of any collation works: the keys reach each source as
// an array parameter, so the column's collation decides the comparison
// (a join against stead's "C" keys could not choose one: 42P22).
func TestSourceCollations(t *testing.T) {
	t.Parallel()
	for _, coll := range []string{`"POSIX"`, `"und-x-icu"`, `"C"`, "ci"} {
		t.Run(coll, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			e := open(t, db, "")
			ctx := context.Background()
			schema := pgxIdent(db.Schema)
			if coll == "ci" {
				coll = schema + ".ci"
				if _, err := e.Pool().Exec(ctx, "CREATE COLLATION "+coll+" (provider = icu, locale = 'und-u-ks-level2', deterministic = false)"); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := e.Pool().Exec(ctx, "CREATE TABLE "+schema+".app_refs (k text COLLATE "+coll+" PRIMARY KEY)"); err != nil {
				t.Fatal(err)
			}
			col := gc.New(e.GC(), gc.Options{Grace: time.Microsecond})
			if err := col.RegisterSource(ctx, gc.Source{Schema: db.Schema, Table: "app_refs", Column: "k"}); err != nil {
				t.Fatal(err)
			}
			s := blob.NewStore(e.Blobs(), blob.Options{PinTTL: time.Millisecond})
			kept, err := s.Put(ctx, bytesReader(1))
			if err != nil {
				t.Fatal(err)
			}
			gone, err := s.Put(ctx, bytesReader(2))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.Pool().Exec(ctx, "INSERT INTO "+schema+".app_refs VALUES ($1)", kept.String()); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Millisecond)
			for range 2 {
				if _, err := col.Sweep(ctx, gc.SweepOptions{}); err != nil {
					t.Fatalf("Sweep with a source collated %s: %v", coll, err)
				}
				time.Sleep(time.Millisecond)
			}
			if _, err := s.Stat(ctx, kept); err != nil {
				t.Errorf("the referenced blob: %v", err)
			}
			if _, err := s.Stat(ctx, gone); !errors.Is(err, steaderr.ErrNotFound) {
				t.Errorf("the unreferenced blob = %v, want collected", err)
			}
			if x, err := col.Explain(ctx, kept); err != nil || len(x.Sources) != 1 {
				t.Errorf("Explain = %+v, %v; want the source named", x, err)
			}
		})
	}
}

// A source that can no longer be read fails every sweep with an error
// naming it (of several) and wrapping ErrSchema, whatever broke it.
func TestSourceBroken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, ddl string }{
		{"column dropped", "ALTER TABLE %s DROP COLUMN k"},
		{"column type changed", "ALTER TABLE %s ALTER COLUMN k TYPE integer USING 0"},
		{"table dropped", "DROP TABLE %s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			e := open(t, db, "")
			ctx := context.Background()
			col := gc.New(e.GC(), gc.Options{Grace: time.Microsecond})
			for _, table := range []string{"good", "broken"} {
				if _, err := e.Pool().Exec(ctx, "CREATE TABLE "+pgxIdent(db.Schema)+"."+table+" (id int, k text)"); err != nil {
					t.Fatal(err)
				}
				if err := col.RegisterSource(ctx, gc.Source{Schema: db.Schema, Table: table, Column: "k"}); err != nil {
					t.Fatal(err)
				}
			}
			s := blob.NewStore(e.Blobs(), blob.Options{PinTTL: time.Millisecond})
			key, err := s.Put(ctx, bytesReader(1))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := col.Sweep(ctx, gc.SweepOptions{}); err != nil {
				t.Fatalf("Sweep before the source broke: %v", err)
			}
			if _, err := e.Pool().Exec(ctx, fmt.Sprintf(tc.ddl, pgxIdent(db.Schema)+".broken")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Millisecond)
			for range 2 {
				_, err := col.Sweep(ctx, gc.SweepOptions{})
				if !errors.Is(err, steaderr.ErrSchema) || !strings.Contains(err.Error(), "liveness source") ||
					!strings.Contains(err.Error(), ".broken(k)") || strings.Contains(err.Error(), "good") || strings.Contains(err.Error(), "migrate") {
					t.Fatalf("Sweep with a source %s = %v, want ErrSchema naming that source", tc.name, err)
				}
			}
			if _, err := s.Stat(ctx, key); err != nil {
				t.Fatalf("a sweep with a broken source deleted: %v", err)
			}
			_, err = col.Explain(ctx, key)
			if !errors.Is(err, steaderr.ErrSchema) || !strings.Contains(err.Error(), ".broken(k)") {
				t.Errorf("Explain with a broken source = %v, want ErrSchema naming it", err)
			}
		})
	}
}
