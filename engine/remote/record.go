package remote

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/steaderr"
)

type records struct{ e *Engine }

func (r *records) RegisterGroup(ctx context.Context, group string) error {
	_, err := r.e.do(ctx, http.MethodPut, "/v1/groups/"+escape(group), nil, nil, nil)
	return err
}

func (r *records) GroupExists(ctx context.Context, group string) (bool, error) {
	_, err := r.e.do(ctx, http.MethodGet, "/v1/groups/"+escape(group), nil, nil, nil)
	if errors.Is(err, steaderr.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (r *records) Save(ctx context.Context, p record.SaveParams) (record.Record, error) {
	h := http.Header{}
	if p.Record.Version == 0 {
		h.Set("If-None-Match", "*")
	} else {
		h.Set("If-Match", wire.ETag(p.Record.Version))
	}
	in := wire.FromRecord(p.Record)
	in.Version, in.UpdatedAt, in.Now = 0, time.Time{}, p.Now
	var out wire.Record
	if _, err := r.e.do(ctx, http.MethodPut, "/v1/records/"+escape(p.Record.ID), &request{header: h}, in, &out); err != nil {
		return record.Record{}, err
	}
	stored := out.ToRecord()
	stored.Payload = p.Record.Payload
	return stored, nil
}

// SaveAll saves each record with its own request, in order: the API has
// no batch save, so the server commits each alone.
func (r *records) SaveAll(ctx context.Context, p record.SaveAllParams) []record.SaveResult {
	out := make([]record.SaveResult, len(p.Records))
	for i, rec := range p.Records {
		out[i].Record, out[i].Err = r.Save(ctx, record.SaveParams{Record: rec, Now: p.Now})
	}
	return out
}

func (r *records) Load(ctx context.Context, id string) (record.Record, error) {
	var out wire.Record
	if _, err := r.e.do(ctx, http.MethodGet, "/v1/records/"+escape(id), nil, nil, &out); err != nil {
		return record.Record{}, err
	}
	return out.ToRecord(), nil
}

func (r *records) Delete(ctx context.Context, id string) error {
	_, err := r.e.do(ctx, http.MethodDelete, "/v1/records/"+escape(id), nil, nil, nil)
	return err
}

func toRecords(in []wire.Record) []record.Record {
	out := make([]record.Record, len(in))
	for i, w := range in {
		out[i] = w.ToRecord()
	}
	return out
}

func (r *records) ListClaimable(ctx context.Context, p record.ListParams) ([]record.Record, error) {
	var out wire.Records
	q := query("limit", strconv.Itoa(p.Limit), "now", timeText(p.Now))
	if _, err := r.e.do(ctx, http.MethodGet, "/v1/groups/"+escape(p.Group)+"/claimable", &request{query: q}, nil, &out); err != nil {
		return nil, err
	}
	return toRecords(out.Records), nil
}

// ListLeased asks for at most record.MaxListLeased records, the server's
// page bound.
func (r *records) ListLeased(ctx context.Context, p record.ListLeasedParams) ([]record.Record, error) {
	var out wire.RecordPage
	q := query("after", p.After, "limit", strconv.Itoa(min(p.Limit, record.MaxListLeased)), "now", timeText(p.Now))
	if _, err := r.e.do(ctx, http.MethodGet, "/v1/groups/"+escape(p.Group)+"/leased", &request{query: q}, nil, &out); err != nil {
		return nil, err
	}
	return toRecords(out.Records), nil
}

func (r *records) Claim(ctx context.Context, p record.ClaimParams) (record.Record, error) {
	var out wire.Record
	in := wire.ClaimRequest{Group: p.Group, Owner: p.Owner, TTL: wire.Duration(p.TTL), Now: p.Now}
	if _, err := r.e.do(ctx, http.MethodPost, "/v1/records/"+escape(p.ID)+"/claim", nil, in, &out); err != nil {
		return record.Record{}, err
	}
	return out.ToRecord(), nil
}

func (r *records) ClaimNext(ctx context.Context, p record.ClaimNextParams) ([]record.Record, error) {
	var out wire.Records
	in := wire.ClaimRequest{Owner: p.Owner, TTL: wire.Duration(p.TTL), N: p.N, Now: p.Now}
	if _, err := r.e.do(ctx, http.MethodPost, "/v1/groups/"+escape(p.Group)+"/claim-next", nil, in, &out); err != nil {
		return nil, err
	}
	return toRecords(out.Records), nil
}

func (r *records) Renew(ctx context.Context, p record.RenewParams) (record.Lease, error) {
	var out wire.Lease
	in := wire.ClaimRequest{Group: p.Group, Owner: p.Owner, Incarnation: p.Incarnation, TTL: wire.Duration(p.TTL), Now: p.Now}
	if _, err := r.e.do(ctx, http.MethodPost, "/v1/records/"+escape(p.ID)+"/renew", nil, in, &out); err != nil {
		return record.Lease{}, err
	}
	return record.Lease{Owner: out.Owner, Incarnation: out.Incarnation, Expiry: out.Expiry}, nil
}

func (r *records) Probe(ctx context.Context, p record.ProbeParams) (record.Probe, error) {
	var out wire.Probe
	q := query("now", timeText(p.Now))
	if _, err := r.e.do(ctx, http.MethodGet, "/v1/groups/"+escape(p.Group)+"/probe", &request{query: q}, nil, &out); err != nil {
		return record.Probe{}, err
	}
	return record.Probe{Claimable: out.Claimable, Until: time.Duration(out.Until)}, nil
}

// WatchClaimable is never live: the API has no commit stream, so
// WaitClaimable polls.
func (r *records) WatchClaimable(ctx context.Context, _ string) (<-chan struct{}, bool, func(), error) {
	if r.e.closed.Load() {
		return nil, false, func() {}, steaderr.ErrClosed
	}
	return nil, false, func() {}, ctx.Err()
}
