package remote

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/ref"
)

// Resolve asks GET /v1/refs/{name}?stored=true (with touch, when p.TTL >
// 0): the server resolves the ref in one call of its engine and answers
// the ref with its blob's stored form, at most wire.MaxResolved bytes.
func (r refs) Resolve(ctx context.Context, p ref.ResolveParams) (ref.Ref, blob.Stored, error) {
	q := query("stored", "true", "now", timeText(p.Now))
	if p.TTL > 0 {
		q.Set("touch", p.TTL.String())
	}
	resp, err := r.e.send(ctx, http.MethodGet, refPath(p.Name), &request{query: q}, nil)
	if err != nil {
		return ref.Ref{}, blob.Stored{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ref.Ref{}, blob.Stored{}, errorOf(resp)
	}
	var out wire.Resolved
	if err := json.NewDecoder(io.LimitReader(resp.Body, wire.MaxResolved)).Decode(&out); err != nil {
		return ref.Ref{}, blob.Stored{}, fmt.Errorf("remote: ref %.80q: %w: %w", p.Name, errMalformed, err)
	}
	got, err := readRef(out.Ref)
	if err != nil {
		return ref.Ref{}, blob.Stored{}, err
	}
	if got.Name != p.Name {
		return ref.Ref{}, blob.Stored{}, fmt.Errorf("remote: ref %.80q: %w: answered ref %.80q", p.Name, errMalformed, got.Name)
	}
	st, err := readStored(got.Key, out.Stored)
	if err != nil {
		return ref.Ref{}, blob.Stored{}, err
	}
	return got, st, nil
}
