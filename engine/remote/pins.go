package remote

import (
	"context"
	"net/http"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote/wire"
)

// Pin pins a stored blob for p.Owner and p.TTL: POST /v1/blobs/{key}/pins.
func (b *blobs) Pin(ctx context.Context, p blob.PinParams) error {
	in := wire.PinRequest{Owner: p.Owner, TTL: wire.Duration(p.TTL), Now: p.Now}
	_, err := b.e.do(ctx, http.MethodPost, "/v1/blobs/"+p.Key.String()+"/pins", nil, in, nil)
	return err
}

// RenewPin extends a live pin: PUT /v1/blobs/{key}/pins/{owner}.
func (b *blobs) RenewPin(ctx context.Context, p blob.PinParams) (bool, error) {
	in := wire.PinRequest{TTL: wire.Duration(p.TTL), Now: p.Now}
	var out wire.PinAnswer
	if _, err := b.e.do(ctx, http.MethodPut, pinPath(p.Key, p.Owner), nil, in, &out); err != nil {
		return false, err
	}
	return out.Renewed, nil
}

// Unpin removes a pin: DELETE /v1/blobs/{key}/pins/{owner}.
func (b *blobs) Unpin(ctx context.Context, p blob.UnpinParams) error {
	_, err := b.e.do(ctx, http.MethodDelete, pinPath(p.Key, p.Owner), nil, nil, nil)
	return err
}

func pinPath(key blob.Key, owner string) string {
	return "/v1/blobs/" + key.String() + "/pins/" + escape(owner)
}
