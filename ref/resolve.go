package ref

import (
	"context"
	"fmt"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/steaderr"
)

// ResolveParams are the arguments of Backend.Resolve. TTL 0 renews
// nothing.
type ResolveParams struct {
	Name string
	TTL  time.Duration
	Now  time.Time
}

// Open returns the live ref name and a reader over the blob it names, both
// read in one engine call, from one snapshot: the reader reads that ref's
// key, never a key the ref named before or after. With ttl > 0 it renews
// the ref as GetTouch does (to expire ttl from now, once less than half of
// ttl is left: a write per half ttl, not per read); 0 renews nothing. The
// reader reads as blob.Store.Get's does (chunked and tiered values fetched
// as they are read, with ctx; Options.VerifyReads). An absent or expired
// ref, or a weak one whose blob was collected, is an error wrapping
// ErrNotFound. The caller closes the reader.
func (s *Store) Open(ctx context.Context, name string, ttl time.Duration) (Ref, *blob.Reader, error) {
	if s.blobs == nil {
		return Ref{}, nil, fmt.Errorf("ref open %.80q: %w: the ref store reads no blobs (Options.Blobs)", name, steaderr.ErrInvalidArgument)
	}
	r, st, err := s.Resolve(ctx, name, ttl)
	if err != nil {
		return Ref{}, nil, err
	}
	rd, err := s.blobs.Reader(ctx, r.Key, st)
	if err != nil {
		return Ref{}, nil, fmt.Errorf("ref open %.80q: %w", name, err)
	}
	return r, rd, nil
}

// Resolve is Open's engine call, checked as Open checks it: the live ref
// name and the stored form of its blob, for an adapter that hands the
// stored form on (stead serve, to a remote engine) rather than reads it.
func (s *Store) Resolve(ctx context.Context, name string, ttl time.Duration) (Ref, blob.Stored, error) {
	ttl, err := checkTTL(ttl, true)
	if err == nil {
		err = checkCall(ctx, name)
	}
	if err != nil {
		return Ref{}, blob.Stored{}, fmt.Errorf("ref open %.80q: %w", name, err)
	}
	r, st, err := s.eng.Resolve(ctx, ResolveParams{Name: name, TTL: ttl, Now: s.clock()})
	if err != nil {
		return Ref{}, blob.Stored{}, fmt.Errorf("ref open %.80q: %w", name, err)
	}
	return r, st, nil
}
