package ref

import (
	"context"
	"fmt"
	"io"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/steaderr"
)

// MaxPutRefs bounds the refs one Put sets.
const MaxPutRefs = 64

// PutRef is one ref a Put sets to the key it stores: Name, set as Set
// sets it with SetOptions.
type PutRef struct {
	Name string
	SetOptions
}

// PutOptions are the options of Put.
type PutOptions struct {
	// Expect, when not zero, is the key the content must hash to (else
	// ErrDigestMismatch, nothing stored).
	Expect blob.Key
	// Refs are the refs set to the content's key: at least one, at most
	// MaxPutRefs, their names distinct.
	Refs []PutRef
}

// RefusedError is the error of a put whose ref's condition failed: it
// names the ref and wraps why (an error wrapping steaderr.ErrConflict).
// Find it with errors.As.
type RefusedError struct {
	Name string
	Err  error
}

func (e *RefusedError) Error() string { return fmt.Sprintf("ref %.80q: %v", e.Name, e.Err) }

func (e *RefusedError) Unwrap() error { return e.Err }

// PutResult is what a Put stored.
type PutResult struct {
	Key blob.Key
	// Created is true when this put stored the blob (blob.PutResult).
	Created bool
	// Refs are the refs as set, with their new versions, in
	// PutOptions.Refs' order.
	Refs []Ref
}

// Put stores the content of r as blob.Store.PutWith does (through the
// Options.Blobs store: its hashing, limits and pin) and sets opts.Refs to
// its key. Content within the inline limit is stored and its refs set in
// one commit, all or nothing: a ref whose condition fails (ErrConflict)
// fails the Put, and neither the blob nor its pin nor any ref is stored.
// Larger content is put first, then its refs are set one by one, the
// put's pin keeping the blob meanwhile: a failure then may leave the blob
// stored and the refs before the failing one set, each as Set leaves it.
// Errors: those of blob.Store.PutWith and of Set; ErrInvalidArgument for
// no ref, too many or a name twice, and for a Store without
// Options.Blobs. Bad input stores nothing.
func (s *Store) Put(ctx context.Context, r io.Reader, opts PutOptions) (PutResult, error) {
	sets, err := s.putSets(opts.Refs)
	if err == nil && s.blobs == nil {
		err = fmt.Errorf("%w: the ref store has no blob store to put through (Options.Blobs)", steaderr.ErrInvalidArgument)
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return PutResult{}, fmt.Errorf("ref put: %w", err)
	}
	var refs []Ref
	res, ran, err := s.blobs.PutVia(ctx, r, blob.PutOptions{Expect: opts.Expect}, func(ctx context.Context, p blob.PutParams) (created bool, err error) {
		created, refs, err = s.putSet(ctx, p, sets)
		return created, err
	})
	if err != nil {
		return PutResult{}, fmt.Errorf("ref put: %w", err)
	}
	if !ran {
		refs = make([]Ref, 0, len(sets))
		for _, p := range sets {
			p.Key = res.Key
			r, err := s.eng.Set(ctx, p)
			if err != nil {
				return PutResult{}, fmt.Errorf("ref put %s: ref set %.80q: %w", res.Key, p.Name, err)
			}
			refs = append(refs, r)
		}
	}
	return PutResult{Key: res.Key, Created: res.Created, Refs: refs}, nil
}

// PutSet is Put for a caller that has hashed and pinned the value itself
// (the server, for a remote engine's Backend.PutSet): it checks refs as
// Put does, and p as far as the engine relies on it (an inline value, no
// children, a key, a pin owner and TTL), then stores p and sets refs to
// p.Key in one commit, all or nothing.
func (s *Store) PutSet(ctx context.Context, p blob.PutParams, refs []PutRef) (created bool, out []Ref, err error) {
	sets, err := s.putSets(refs)
	switch {
	case err != nil:
	case p.Key.IsZero():
		err = fmt.Errorf("%w: zero key", steaderr.ErrInvalidKey)
	case p.Chunks != 0 || len(p.Children) > 0:
		err = fmt.Errorf("%w: a put with refs stores an inline value without children", steaderr.ErrInvalidArgument)
	case p.Owner == "" || p.TTL <= 0:
		err = fmt.Errorf("%w: a put with refs pins for an owner and a positive TTL", steaderr.ErrInvalidArgument)
	}
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		created, out, err = s.putSet(ctx, p, sets)
	}
	if err != nil {
		return false, nil, fmt.Errorf("ref put %s: %w", p.Key, err)
	}
	return created, out, nil
}

// putSet sets sets' keys to p.Key and sends them with p to the engine.
func (s *Store) putSet(ctx context.Context, p blob.PutParams, sets []SetParams) (bool, []Ref, error) {
	for i := range sets {
		sets[i].Key = p.Key
	}
	return s.eng.PutSet(ctx, p, sets)
}

// putSets checks the refs of a Put and returns their SetParams, all but
// the key.
func (s *Store) putSets(refs []PutRef) ([]SetParams, error) {
	switch {
	case len(refs) == 0:
		return nil, fmt.Errorf("%w: no ref to set", steaderr.ErrInvalidArgument)
	case len(refs) > MaxPutRefs:
		return nil, fmt.Errorf("%w: %d refs, at most %d", steaderr.ErrInvalidArgument, len(refs), MaxPutRefs)
	}
	sets := make([]SetParams, len(refs))
	seen := make(map[string]bool, len(refs))
	for i, r := range refs {
		p, err := s.setParams(r.Name, r.SetOptions)
		if err == nil && seen[r.Name] {
			err = fmt.Errorf("%w: the ref is named twice", steaderr.ErrInvalidArgument)
		}
		if err != nil {
			return nil, fmt.Errorf("ref %.80q: %w", r.Name, err)
		}
		seen[r.Name] = true
		sets[i] = p
	}
	return sets, nil
}
