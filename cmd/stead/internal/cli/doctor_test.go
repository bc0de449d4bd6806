package cli

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/internal/testing/pgtest"
)

// TestDoctorDeadRows: doctor warns, naming the table, when deleted blobs
// left 64 MiB or more of dead rows that no vacuum has removed (here, with
// autovacuum off for the test's blob_chunks, 70 MiB).
func TestDoctorDeadRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t)
	url := db.StoreURL()
	st, err := stead.Open(ctx, url, stead.WithPinTTL(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := db.Admin.Exec(ctx, `ALTER TABLE `+pgx.Identifier{db.Schema, "blob_chunks"}.Sanitize()+
		` SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)`); err != nil {
		t.Fatal(err)
	}
	if code, stdout, _ := run(t, ctx, "--db", url, "doctor"); code != 0 || !strings.Contains(stdout, "ok    dead rows") {
		t.Fatalf("doctor before the deletes = %d %q, want 0 and dead rows ok", code, stdout)
	}
	rng := rand.New(rand.NewChaCha8([32]byte{22, 5}))
	value := make([]byte, 1<<20)
	for range 70 {
		for i := range value {
			value[i] = byte(rng.Uint32())
		}
		key, err := st.Blobs.Put(ctx, bytes.NewReader(value))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond) // its pin lapses
		if err := st.Blobs.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	// Backends report their statistics when they exit at the latest.
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	var code int
	var stdout string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		code, stdout, _ = run(t, context.WithoutCancel(ctx), "--db", url, "doctor")
		if strings.Contains(stdout, "warn  dead rows") || time.Now().After(deadline) {
			break
		}
	}
	if code != exitWarn || !strings.Contains(stdout, "warn  dead rows          blob_chunks (TOAST): about ") || !strings.Contains(stdout, "docs/guides/operations.md") {
		t.Fatalf("doctor after 70 MiB of deletes = %d %q, want 4 and a dead rows warning for blob_chunks' TOAST table", code, stdout)
	}
}
