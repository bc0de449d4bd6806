package postgres_test

import (
	"errors"
	"testing"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/steaderr"
)

// TestResumeUploadBeforeMigration checks that an upload begun before
// uploads kept their hash state (migration 16) is not resumed: ErrLost, as
// for any upload not to be had, so that its client starts over.
func TestResumeUploadBeforeMigration(t *testing.T) {
	ctx := t.Context()
	s := newTiered(t)
	e := openVirgin(t, s.db, s.params)
	if err := postgres.MigrateTo(ctx, e, 15); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Admin.Exec(ctx, "INSERT INTO "+s.table("blob_uploads")+" (id, expires_at) VALUES (404, now() + interval '1 hour')"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Admin.Exec(ctx, "INSERT INTO "+s.table("blob_chunks")+" (chunks, off, data) VALUES (404, 0, '\\x0102')"); err != nil {
		t.Fatal(err)
	}
	if err := e.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := blob.NewStore(e.Blobs(), blob.Options{}).ResumeUpload(ctx, "0000000000000194", blob.UploadOptions{})
	if !errors.Is(err, steaderr.ErrLost) {
		t.Fatalf("ResumeUpload of a pre-migration upload = %v (ErrCorrupt=%v); want ErrLost", err, errors.Is(err, steaderr.ErrCorrupt))
	}
}
