package memory

import (
	"context"
	"fmt"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// PutSet puts the blob and applies the Sets under the one lock an
// arbitration takes too, every condition checked before anything is
// written.
func (m refMech) PutSet(ctx context.Context, p blob.PutParams, sets []ref.SetParams) (bool, []ref.Ref, error) {
	if p.Chunks != 0 || len(p.Children) > 0 {
		return false, nil, fmt.Errorf("%w: a put with refs stores an inline value without children", steaderr.ErrInvalidArgument)
	}
	b := m.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.e.check(ctx); err != nil {
		return false, nil, err
	}
	for _, s := range sets {
		if err := b.setCond(s); err != nil {
			return false, nil, &ref.RefusedError{Name: s.Name, Err: err}
		}
	}
	created, err := b.put(p)
	if err != nil {
		return false, nil, err
	}
	refs := make([]ref.Ref, len(sets))
	for i, s := range sets {
		refs[i] = b.set(s)
	}
	return created, refs, nil
}
