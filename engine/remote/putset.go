package remote

import (
	"context"
	"fmt"
	"net/http"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/ref"
)

// PutSet sends the value and the refs in one request, POST
// /v1/blobs/{key}/refs, which the server commits as one PutSet.
func (r refs) PutSet(ctx context.Context, p blob.PutParams, sets []ref.SetParams) (bool, []ref.Ref, error) {
	q := query("now", timeText(p.Now))
	q.Set("owner", p.Owner)
	q.Set("ttl", p.TTL.String())
	in := wire.PutSet{Value: p.Value, Refs: make([]wire.PutSetRef, len(sets))}
	if in.Value == nil {
		in.Value = []byte{}
	}
	for i, s := range sets {
		x := wire.PutSetRef{Name: s.Name, Annotation: s.Annotation, Weak: s.Weak, Now: s.Now}
		switch s.Cond {
		case ref.IfAbsent:
			x.IfAbsent = true
		case ref.IfVersion:
			x.IfVersion = s.Version
		}
		if s.TTL > 0 {
			ttl := wire.Duration(s.TTL)
			x.TTL = &ttl
		}
		in.Refs[i] = x
	}
	var out wire.PutSetResult
	resp, err := r.e.do(ctx, http.MethodPost, "/v1/blobs/"+p.Key.String()+"/refs", &request{query: q}, in, &out)
	if err != nil {
		return false, nil, err
	}
	if len(out.Refs) != len(sets) || len(out.RefsCreated) != len(sets) {
		return false, nil, fmt.Errorf("ref put: %w: %d refs for %d set", errMalformed, len(out.Refs), len(sets))
	}
	got := make([]ref.Ref, len(sets))
	for i, w := range out.Refs {
		if got[i], err = readRef(w); err != nil {
			return false, nil, err
		}
		got[i].Created = out.RefsCreated[i]
	}
	return resp.StatusCode == http.StatusCreated, got, nil
}
