package remote

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/ref"
)

// refs drives /v1/refs.
type refs struct{ e *Engine }

// Refs returns the engine's ref mechanics.
func (e *Engine) Refs() ref.Backend { return refs{e} }

// refPath is the path of a ref, as docs/openapi.yaml lists it: its
// name's segments escaped one by one and joined by literal slashes, the
// segments past wire.RefDepth in the last, their slashes escaped. A name
// with an empty, "." or ".." segment, which the server refuses, is
// escaped whole, so that no router reads it as a path step.
func refPath(name string) string {
	segs := strings.Split(name, "/")
	if slices.ContainsFunc(segs, func(s string) bool { return s == "" || s == "." || s == ".." }) {
		return "/v1/refs/" + escape(name)
	}
	if len(segs) > wire.RefDepth {
		segs = append(segs[:wire.RefDepth-1], strings.Join(segs[wire.RefDepth-1:], "/"))
	}
	for i, s := range segs {
		segs[i] = escape(s)
	}
	return "/v1/refs/" + strings.Join(segs, "/")
}

func readRef(w wire.Ref) (ref.Ref, error) {
	k, err := blob.ParseKey(w.Key)
	if err != nil || w.Version < 1 {
		return ref.Ref{}, fmt.Errorf("ref %q: %w: key %q, version %d", w.Name, errMalformed, w.Key, w.Version)
	}
	return ref.Ref{Name: w.Name, Key: k, Version: w.Version, Annotation: w.Annotation, Expiry: w.Expiry, Weak: w.Weak}, nil
}

func (r refs) Set(ctx context.Context, p ref.SetParams) (ref.Ref, error) {
	h := http.Header{}
	switch p.Cond {
	case ref.IfAbsent:
		h.Set("If-None-Match", "*")
	case ref.IfVersion:
		h.Set("If-Match", wire.ETag(p.Version))
	}
	var out wire.Ref
	in := wire.RefSet{Key: p.Key.String(), Annotation: p.Annotation, Weak: p.Weak, Now: p.Now}
	if p.TTL > 0 {
		ttl := wire.Duration(p.TTL)
		in.TTL = &ttl
	}
	resp, err := r.e.do(ctx, http.MethodPut, refPath(p.Name), &request{header: h}, in, &out)
	if err != nil {
		return ref.Ref{}, err
	}
	x, err := readRef(out)
	x.Created = resp.StatusCode == http.StatusCreated
	return x, err
}

func (r refs) Get(ctx context.Context, p ref.GetParams) (ref.Ref, error) {
	var out wire.Ref
	if _, err := r.e.do(ctx, http.MethodGet, refPath(p.Name), &request{query: query("now", timeText(p.Now))}, nil, &out); err != nil {
		return ref.Ref{}, err
	}
	return readRef(out)
}

func (r refs) Touch(ctx context.Context, p ref.TouchParams) (ref.Ref, error) {
	var out wire.Ref
	if _, err := r.e.do(ctx, http.MethodPatch, refPath(p.Name), nil, wire.RefTouch{TTL: wire.Duration(p.TTL), Now: p.Now, Lazy: p.Lazy}, &out); err != nil {
		return ref.Ref{}, err
	}
	return readRef(out)
}

func (r refs) Delete(ctx context.Context, p ref.DeleteParams) error {
	h := http.Header{}
	if p.Version != 0 {
		h.Set("If-Match", wire.ETag(p.Version))
	}
	_, err := r.e.do(ctx, http.MethodDelete, refPath(p.Name), &request{header: h, query: query("now", timeText(p.Now))}, nil, nil)
	return err
}

// List asks for at most wire.MaxListLimit refs, the server's page bound
// (a shorter page is not the end; an empty one is), and refuses an answer
// out of name order or outside the prefix.
func (r refs) List(ctx context.Context, p ref.ListParams, yield func(ref.Ref) bool) error {
	limit := min(p.Limit, wire.MaxListLimit)
	q := query("prefix", p.Prefix, "after", p.After, "now", timeText(p.Now))
	q.Set("limit", strconv.Itoa(limit))
	var out wire.RefPage
	if _, err := r.e.do(ctx, http.MethodGet, "/v1/refs", &request{query: q}, nil, &out); err != nil {
		return err
	}
	if len(out.Refs) > limit {
		return fmt.Errorf("ref list: %w: %d refs for a limit of %d", errMalformed, len(out.Refs), limit)
	}
	last := p.After
	for _, w := range out.Refs {
		x, err := readRef(w)
		if err != nil {
			return err
		}
		if x.Name <= last || !strings.HasPrefix(x.Name, p.Prefix) {
			return fmt.Errorf("ref list: %w: %.80q after %.80q, or outside prefix %.80q", errMalformed, x.Name, last, p.Prefix)
		}
		last = x.Name
		if !yield(x) {
			return nil
		}
	}
	return nil
}
