package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/steaderr"
)

// An application registers a Go-function source on a SQLite file; another
// process on the same file (the CLI's `stead gc`) does not know it. That
// process must refuse to sweep or delete, naming the source, until it
// registers it or clears the stale mark.
func TestSweepRefusesUnknownGoSource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "app.db")
	app := openEngine(t, path)
	mustMigrate(t, app)
	s := blob.NewStore(app.Blobs(), blob.Options{PinTTL: time.Millisecond})
	key, err := s.Put(ctx, strings.NewReader("referenced by the app"))
	if err != nil {
		t.Fatal(err)
	}
	appCol := gc.New(app.GC(), gc.Options{Grace: time.Microsecond})
	src := gc.Source{Name: "manifests", Referenced: func(_ context.Context, k blob.Key) (bool, error) { return k == key, nil }}
	if err := appCol.RegisterSource(ctx, src); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the put's pin expires

	cli := openEngine(t, path)
	cliCol := gc.New(cli.GC(), gc.Options{Grace: time.Microsecond})
	cliStore := blob.NewStore(cli.Blobs(), blob.Options{})
	for range 2 {
		_, err := cliCol.Sweep(ctx, gc.SweepOptions{})
		if !errors.Is(err, gc.ErrSourceMissing) || !strings.Contains(err.Error(), "manifests") {
			t.Fatalf("sweep by a process without the app's Go source = %v, want ErrSourceMissing naming it", err)
		}
		time.Sleep(time.Millisecond)
	}
	if err := cliStore.Delete(ctx, key); !errors.Is(err, gc.ErrSourceMissing) {
		t.Errorf("Delete by a process without the app's Go source = %v, want ErrSourceMissing", err)
	}
	if _, err := s.Stat(ctx, key); err != nil {
		t.Fatalf("the blob the app's source references is gone: %v", err)
	}

	// The app itself sweeps: the source protects the key.
	for range 2 {
		if _, err := appCol.Sweep(ctx, gc.SweepOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := s.Stat(ctx, key); err != nil {
		t.Fatalf("the app's own sweep deleted a referenced blob: %v", err)
	}

	// Unregistering by name (from any process) clears the mark: the store
	// then has no source protecting the key, and a sweep told so deletes.
	if err := cliCol.UnregisterSource(ctx, gc.Source{Name: "manifests"}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := cliCol.Sweep(ctx, gc.SweepOptions{AllUnreferenced: true}); err != nil {
			t.Fatalf("sweep after the stale mark was cleared: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := s.Stat(ctx, key); !errors.Is(err, steaderr.ErrNotFound) {
		t.Errorf("after the source was unregistered, the unreferenced blob = %v, want swept", err)
	}
}
