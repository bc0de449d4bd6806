package blob_test

import (
	"errors"
	"testing"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/memory"
	"github.com/steadkit/stead/steaderr"
)

// TestReaderRefusesInconsistentForms: Reader refuses a stored form no
// value has, and a zero key, and verifies an inline value as Get does.
func TestReaderRefusesInconsistentForms(t *testing.T) {
	t.Parallel()
	eng := memory.New()
	t.Cleanup(func() { eng.Close() })
	s := blob.NewStore(eng.Blobs(), blob.Options{VerifyReads: true})
	key := blob.KeyOf([]byte("abc"))
	for name, st := range map[string]blob.Stored{
		"negative size":        {Size: -1, Value: []byte{}},
		"inline of other size": {Size: 4, Value: []byte("abc")},
		"chunks with a value":  {Size: 3, Value: []byte("abc"), Chunks: 7},
		"chunks and object":    {Size: 3, Chunks: 7, Object: "o"},
	} {
		if _, err := s.Reader(t.Context(), key, st); !errors.Is(err, steaderr.ErrInvalidArgument) {
			t.Errorf("%s: Reader = %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := s.Reader(t.Context(), blob.Key{}, blob.Stored{Value: []byte{}}); !errors.Is(err, steaderr.ErrInvalidKey) {
		t.Errorf("zero key: Reader = %v, want ErrInvalidKey", err)
	}
	if _, err := s.Reader(t.Context(), key, blob.Stored{Size: 3, Value: []byte("abd")}); !errors.Is(err, steaderr.ErrCorrupt) {
		t.Errorf("a value that does not hash to its key: Reader = %v, want ErrCorrupt", err)
	}
	rd, err := s.Reader(t.Context(), key, blob.Stored{Size: 3, Value: []byte("abc")})
	if err != nil || rd.Size() != 3 {
		t.Fatalf("Reader of a good form = %v, %v", rd, err)
	}
}
