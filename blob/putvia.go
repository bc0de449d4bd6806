package blob

import (
	"context"
	"fmt"
	"io"

	"github.com/steadkit/stead/steaderr"
)

// PutVia is PutWith for a caller that commits more beside the put (a
// ref.Store.Put sets refs in the put's commit). A value within the inline
// limit is hashed and checked as PutWith does, then handed to via as the
// PutParams Backend.Put would get (this store's pin owner and TTL), and
// via, which must store it as Backend.Put does, sends it instead of the
// engine's Put; ran is then true, and the put is sent even when this
// store's pin on the key is fresh. A larger value is put as PutWith puts
// it, in chunks, without via: ran is false. An error of via is returned
// as via returned it, not as a blob put's. opts.Children must be empty
// (else ErrInvalidArgument, nothing stored).
func (s *Store) PutVia(ctx context.Context, r io.Reader, opts PutOptions, via func(context.Context, PutParams) (bool, error)) (res PutResult, ran bool, err error) {
	if len(opts.Children) > 0 {
		return PutResult{}, false, fmt.Errorf("blob put: %w: a put through a caller's commit declares no children", steaderr.ErrInvalidArgument)
	}
	var viaErr error
	res, err = s.putWith(ctx, r, opts, func(ctx context.Context, p PutParams) (bool, error) {
		ran = true
		var created bool
		created, viaErr = via(ctx, p)
		return created, viaErr
	})
	if viaErr != nil {
		return PutResult{}, ran, viaErr
	}
	return res, ran, err
}
