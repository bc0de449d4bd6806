package remote_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// TestRefNamesOfEveryDepth: the remote engine sends a ref's name as
// docs/openapi.yaml lists it (literal slashes, up to its deepest form,
// then %2F), which apicheck holds it to, and the server reads it back
// whole; a name the server refuses reaches it as one segment.
func TestRefNamesOfEveryDepth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := stead.New(ctx, serve(t, "mem://", false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	key, err := st.Blobs.Put(ctx, strings.NewReader("deep"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"top", "tags/hello", "a/b/c/d/e/f/g/h", "a/b/c/d/e/f/g/h/i", strings.Repeat("s/", 40) + "x", "odd name/%2F/~:?#"} {
		if _, err := st.Refs.Set(ctx, name, key, ref.SetOptions{}); err != nil {
			t.Fatalf("set %q: %v", name, err)
		}
		got, err := st.Refs.Get(ctx, name)
		if err != nil || got.Name != name || got.Key != key {
			t.Fatalf("get %q = %+v, %v", name, got, err)
		}
		if err := st.Refs.Delete(ctx, name, 0); err != nil {
			t.Fatalf("delete %q: %v", name, err)
		}
	}
	// The ref store refuses these before any request; the engine itself
	// sends them for the server to refuse.
	for _, name := range []string{"a//b", "a/./b", "../x", "a/"} {
		_, err := st.Engine().Refs().Get(ctx, ref.GetParams{Name: name})
		if !errors.Is(err, steaderr.ErrInvalidName) {
			t.Errorf("engine get %q: %v, want ErrInvalidName", name, err)
		}
	}
}
