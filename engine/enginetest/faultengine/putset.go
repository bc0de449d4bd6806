package faultengine

import (
	"context"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
)

// RefPutSet is ref.Backend.PutSet: a put and its refs in one commit.
const RefPutSet Op = "ref.PutSet"

func (r *refs) PutSet(ctx context.Context, p blob.PutParams, sets []ref.SetParams) (bool, []ref.Ref, error) {
	if err := r.inj.Inject(RefPutSet); err != nil {
		return false, nil, err
	}
	return r.inner.PutSet(ctx, p, sets)
}
