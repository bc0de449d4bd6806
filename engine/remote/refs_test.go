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

// TestRefusedPutSetNamesRef: a Put whose ref is refused (IfAbsent over a
// live ref, IfVersion of another version) fails through the remote
// engine with the library's message, naming the ref and the condition,
// the server's words marked as its own, and still ErrConflict.
func TestRefusedPutSetNamesRef(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	local, err := stead.Open(ctx, "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { local.Close() })
	remote, err := stead.New(ctx, serve(t, "mem://", false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { remote.Close() })
	long := strings.Repeat("n/", 50) + "x" // longer than an error quotes
	for _, name := range []string{"tags/v1", long} {
		for _, c := range []struct {
			what string
			opts ref.SetOptions
		}{
			{"if-absent", ref.SetOptions{IfAbsent: true}},
			{"if-version", ref.SetOptions{IfVersion: 7}},
		} {
			var msgs [2]string
			for i, st := range []*stead.Store{local, remote} {
				if _, err := st.Refs.Put(ctx, strings.NewReader("taken"), ref.PutOptions{Refs: []ref.PutRef{{Name: name}}}); err != nil {
					t.Fatal(err)
				}
				_, err := st.Refs.Put(ctx, strings.NewReader("refused "+c.what), ref.PutOptions{Refs: []ref.PutRef{{Name: "free/" + c.what}, {Name: name, SetOptions: c.opts}}})
				if !errors.Is(err, steaderr.ErrConflict) {
					t.Fatalf("%s %.20q: refused Put = %v, want ErrConflict", c.what, name, err)
				}
				msgs[i] = err.Error()
				if _, err := st.Refs.Get(ctx, "free/"+c.what); !errors.Is(err, steaderr.ErrNotFound) {
					t.Fatalf("%s: a refused Put set its other ref: %v", c.what, err)
				}
			}
			if want := strings.Replace(msgs[1], "server: ", "", 1); want != msgs[0] || !strings.Contains(msgs[1], "server: ") {
				t.Errorf("%s %.20q: remote error %q, want the library's %q with the server's words marked", c.what, name, msgs[1], msgs[0])
			}
		}
	}
}
