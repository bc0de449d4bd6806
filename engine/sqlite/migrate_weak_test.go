package sqlite_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/sqlite"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// TestMigrateRegistryLinksWeak seeds a store as release 10 of the schema
// left it, with registry blob links to the empty blob, and migrates it:
// each link becomes a weak ref to the blob its name carries, a link whose
// blob is gone is dropped, and every other ref is left as it was.
func TestMigrateRegistryLinksWeak(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.db")
	e, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	sqlite.MigrateTo(t, e, 10)
	empty, layer, gone := blob.KeyOf(nil), blob.KeyOf([]byte("a layer")), blob.KeyOf([]byte("a layer collected"))
	db := rawDB(t, path)
	for _, v := range [][]byte{{}, []byte("a layer")} {
		if _, err := db.Exec(`INSERT INTO blobs (key, size, value) VALUES (?, ?, ?)`, blob.KeyOf(v).String(), len(v), v); err != nil {
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
		{"OCI/team/app/_blobs/" + layer.String(), empty}, // names are case-sensitive: not a link
		{"Oci/team/app/_blobs/" + gone.String(), empty},
	}
	for i, r := range refs {
		if _, err := db.Exec(`INSERT INTO refs (name, key, version) VALUES (?, ?, ?)`, r.name, r.key.String(), i+1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`UPDATE ref_versions SET last = ?`, len(refs)); err != nil {
		t.Fatal(err)
	}
	if err := e.Migrate(t.Context()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	s := ref.NewStore(e.Refs(), ref.Options{})
	for _, want := range []ref.Ref{
		{Name: "oci/team/app/_blobs/" + layer.String(), Key: layer, Version: 1, Weak: true},
		{Name: "oci/team/app/_tags/v1", Key: layer, Version: 3},
		{Name: "mine/_blobs/" + layer.String(), Key: empty, Version: 4},
		{Name: "oci/team/app/_blobs/not-a-digest", Key: empty, Version: 5},
		{Name: "OCI/team/app/_blobs/" + layer.String(), Key: empty, Version: 6},
		{Name: "Oci/team/app/_blobs/" + gone.String(), Key: empty, Version: 7},
	} {
		got, err := s.Get(t.Context(), want.Name)
		if err != nil || got.Key != want.Key || got.Version != want.Version || got.Weak != want.Weak {
			t.Errorf("after the migration, Get(%q) = %+v, %v; want %+v", want.Name, got, err, want)
		}
	}
	if _, err := s.Get(t.Context(), "oci/team/app/_blobs/"+gone.String()); !errors.Is(err, steaderr.ErrNotFound) {
		t.Errorf("the link of a blob not stored after the migration: %v, want ErrNotFound", err)
	}
	x, err := e.GC().Explain(t.Context(), gc.ExplainParams{Key: layer})
	if err != nil || len(x.Refs) != 2 || !x.Refs[0].Weak || x.Refs[1].Weak {
		t.Errorf("Explain(layer) = %+v, %v; want the weak link and the strong tag", x.Refs, err)
	}
}
