package sqlite

import (
	"errors"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// A PutSet whose Set names a key other than the put's is refused before
// anything is written: the engine relies on the put storing every key its
// Sets name.
func TestPutSetOtherKey(t *testing.T) {
	t.Parallel()
	e, _ := setup(t)
	value, other := []byte("putset value"), []byte("putset other")
	if _, err := e.Blobs().Put(t.Context(), blob.PutParams{Key: blob.KeyOf(other), Value: other, Owner: "t", TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	p := blob.PutParams{Key: blob.KeyOf(value), Value: value, Owner: "t", TTL: time.Hour}
	sets := []ref.SetParams{
		{Name: "ps/mine", Key: p.Key},
		{Name: "ps/other", Key: blob.KeyOf(other)},
	}
	if _, _, err := e.Refs().PutSet(t.Context(), p, sets); !errors.Is(err, steaderr.ErrInvalidArgument) {
		t.Fatalf("PutSet with another key's Set: %v, want ErrInvalidArgument", err)
	}
	if _, err := e.Blobs().Stat(t.Context(), p.Key); !errors.Is(err, steaderr.ErrNotFound) {
		t.Errorf("Stat after the refused PutSet: %v, want ErrNotFound", err)
	}
	for _, s := range sets {
		if _, err := e.Refs().Get(t.Context(), ref.GetParams{Name: s.Name}); !errors.Is(err, steaderr.ErrNotFound) {
			t.Errorf("Get %q after the refused PutSet: %v, want ErrNotFound", s.Name, err)
		}
	}
}

// The Sets of one PutSet take consecutive versions in their order, after
// those taken before, and a later Set's versions follow.
func TestPutSetVersions(t *testing.T) {
	t.Parallel()
	e, _ := setup(t)
	value := []byte("putset versions")
	k := blob.KeyOf(value)
	before, err := e.Refs().Set(t.Context(), ref.SetParams{Name: "v/0", Key: k})
	if !errors.Is(err, steaderr.ErrNotFound) {
		t.Fatalf("Set before the blob is stored: %+v, %v, want ErrNotFound", before, err)
	}
	p := blob.PutParams{Key: k, Value: value, Owner: "t", TTL: time.Hour}
	_, got, err := e.Refs().PutSet(t.Context(), p, []ref.SetParams{{Name: "v/1", Key: k}, {Name: "v/2", Key: k}, {Name: "v/3", Key: k}})
	if err != nil {
		t.Fatal(err)
	}
	after, err := e.Refs().Set(t.Context(), ref.SetParams{Name: "v/4", Key: k})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range append(got, after) {
		if r.Version != got[0].Version+int64(i) {
			t.Errorf("ref %q version %d, want %d", r.Name, r.Version, got[0].Version+int64(i))
		}
	}
}
