package stead

import (
	"context"
	"errors"
	"fmt"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// MaxUsageRefs bounds the refs one Usage reads: a larger prefix is
// reported Truncated, its counts covering the first MaxUsageRefs refs.
const MaxUsageRefs = 100 * ref.DefaultPageSize

// Usage is what the live refs under a prefix hold.
type Usage struct {
	Prefix string
	// Refs counts the live refs read (strong and weak).
	Refs int64
	// Blobs counts the distinct stored blobs they name, and Bytes their
	// sizes: content several refs name is counted once.
	Blobs, Bytes int64
	// ReferencedBytes sums the size of each ref's blob, a blob counted
	// once per ref naming it; DedupSavedBytes is ReferencedBytes - Bytes,
	// what storing each blob once saved within the prefix.
	ReferencedBytes, DedupSavedBytes int64
	// Truncated reports that the prefix has more than MaxUsageRefs refs:
	// the counts cover the first MaxUsageRefs in name order.
	Truncated bool
}

// Usage reports what the live refs whose names start with prefix hold: a
// registry repository ("oci/team/app/_"), a cache namespace ("cache/"),
// any ref prefix. It reads the refs a page at a time and looks up each
// distinct blob once by key: ⌈refs/ref.DefaultPageSize⌉ list statements
// and one lookup per distinct blob, at most MaxUsageRefs refs. A blob
// referenced only by a blob (a layer under a manifest) counts when a ref
// names it too (the registry links every layer to its repository).
func (s *Store) Usage(ctx context.Context, prefix string) (Usage, error) {
	u := Usage{Prefix: prefix}
	seen := map[blob.Key]int64{} // size of each blob named
	for r, err := range s.Refs.All(ctx, prefix) {
		if err != nil {
			return Usage{}, fmt.Errorf("usage: %w", err)
		}
		if u.Refs == MaxUsageRefs {
			u.Truncated = true
			break
		}
		u.Refs++
		size, ok := seen[r.Key]
		if !ok {
			info, err := s.Blobs.Stat(ctx, r.Key)
			switch {
			case errors.Is(err, steaderr.ErrNotFound):
				size = -1 // a weak ref's blob collected meanwhile
			case err != nil:
				return Usage{}, fmt.Errorf("usage: %w", err)
			default:
				size = info.Size
				u.Blobs++
				u.Bytes += size
			}
			seen[r.Key] = size
		}
		if size > 0 {
			u.ReferencedBytes += size
		}
	}
	u.DedupSavedBytes = u.ReferencedBytes - u.Bytes
	return u, nil
}
