package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/pgtest"
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
		{"CREATE TABLE %[1]s.refs (k text)", "refs", true},
		{"CREATE TABLE %[1]s.refs (k text); CREATE VIEW %[1]s.refs_v AS SELECT k FROM %[1]s.refs", "refs_v", true},
		{"CREATE TABLE %[1]s.refs (k text); CREATE MATERIALIZED VIEW %[1]s.refs_m AS SELECT k FROM %[1]s.refs", "refs_m", true},
		{"CREATE TABLE %[1]s.refs (k text); CREATE INDEX refs_k ON %[1]s.refs (k)", "refs_k", false},
		{"CREATE TYPE %[1]s.refs_t AS (k text)", "refs_t", false},
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
			col := gc.New(e.GC(), gc.Options{Grace: time.Microsecond})
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
	if _, err := e.Pool().Exec(ctx, "CREATE TABLE "+pgxIdent(db.Schema)+".refs (k text)"); err != nil {
		t.Fatal(err)
	}
	col := gc.New(e.GC(), gc.Options{Grace: time.Microsecond})
	if err := col.RegisterSource(ctx, gc.Source{Schema: db.Schema, Table: "refs", Column: "k"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Pool().Exec(ctx, "DROP TABLE "+pgxIdent(db.Schema)+".refs"); err != nil {
		t.Fatal(err)
	}
	_, err := col.Sweep(ctx, gc.SweepOptions{})
	if err == nil || strings.Contains(err.Error(), "migrate") || !strings.Contains(err.Error(), "liveness source") {
		t.Errorf("sweep with a dropped source = %v, want an error naming the missing liveness source", err)
	}
}
