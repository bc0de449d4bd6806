package postgres_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// TestMigrateRegistryLinksWeak seeds a schema as release 12 left it, with
// registry blob links to the empty blob, and migrates it: each link
// becomes a weak ref to the blob its name carries, a link whose blob is
// gone is dropped, and every other ref is left as it was.
func TestMigrateRegistryLinksWeak(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	e := openVirgin(t, db, "")
	if err := postgres.MigrateTo(ctx, e, 12); err != nil {
		t.Fatalf("MigrateTo(12): %v", err)
	}
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	table := func(name string) string { return pgx.Identifier{db.Schema, name}.Sanitize() }
	empty, layer, gone := blob.KeyOf(nil), blob.KeyOf([]byte("a layer")), blob.KeyOf([]byte("a layer collected"))
	for _, v := range [][]byte{{}, []byte("a layer")} {
		if _, err := conn.Exec(ctx, `INSERT INTO `+table("blobs")+` (key, size, value) VALUES ($1, $2, $3)`, blob.KeyOf(v).String(), len(v), v); err != nil {
			t.Fatal(err)
		}
	}
	refs := []struct {
		name string
		key  blob.Key
	}{
		{"oci/team/app/_blobs/" + layer.String(), empty},
		{"oci/team/app/_blobs/" + gone.String(), empty},
		{"oci/team/app/_tags/v1", layer},
		{"mine/_blobs/" + layer.String(), empty},
		{"oci/team/app/_blobs/not-a-digest", empty},
	}
	for i, r := range refs {
		if _, err := conn.Exec(ctx, `INSERT INTO `+table("refs")+` (name, key, version) VALUES ($1, $2, $3)`, r.name, r.key.String(), i+1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, `SELECT setval($1::regclass, $2)`, table("ref_versions"), len(refs)); err != nil {
		t.Fatal(err)
	}
	if err := e.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	s := ref.NewStore(e.Refs(), ref.Options{})
	for _, want := range []ref.Ref{
		{Name: "oci/team/app/_blobs/" + layer.String(), Key: layer, Version: 1, Weak: true},
		{Name: "oci/team/app/_tags/v1", Key: layer, Version: 3},
		{Name: "mine/_blobs/" + layer.String(), Key: empty, Version: 4},
		{Name: "oci/team/app/_blobs/not-a-digest", Key: empty, Version: 5},
	} {
		got, err := s.Get(ctx, want.Name)
		if err != nil || got.Key != want.Key || got.Version != want.Version || got.Weak != want.Weak {
			t.Errorf("after the migration, Get(%q) = %+v, %v; want %+v", want.Name, got, err, want)
		}
	}
	if _, err := s.Get(ctx, "oci/team/app/_blobs/"+gone.String()); !errors.Is(err, steaderr.ErrNotFound) {
		t.Errorf("the link of a blob not stored after the migration: %v, want ErrNotFound", err)
	}
	x, err := e.GC().Explain(ctx, gc.ExplainParams{Key: layer})
	if err != nil || len(x.Refs) != 2 || !x.Refs[0].Weak || x.Refs[1].Weak {
		t.Errorf("Explain(layer) = %+v, %v; want the weak link and the strong tag", x.Refs, err)
	}
}
