package ref

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/steaderr"
)

// DefaultPageSize is how many refs All reads from the engine at a time.
const DefaultPageSize = 1000

// Options configures a Store.
type Options struct {
	// Now is the clock expiries are measured against, for tests that move
	// time without sleeping. Defaults to nil: the engine's clock (the
	// database's now() on PostgreSQL, the system clock elsewhere).
	Now func() time.Time
	// Blobs is the blob store Open reads and Put stores through (its
	// hashing, size limits and pin). Defaults to nil: Open and Put are
	// refused with steaderr.ErrInvalidArgument (a stead.Store's refs have
	// one).
	Blobs *blob.Store
}

// Store is the ref capability of a stead store. It is safe for concurrent
// use.
type Store struct {
	eng   Backend
	now   func() time.Time
	blobs *blob.Store
}

// NewStore returns a Store over eng.
func NewStore(eng Backend, opts Options) *Store {
	return &Store{eng: eng, now: opts.Now, blobs: opts.Blobs}
}

// SetOptions are the options of Set.
type SetOptions struct {
	// IfAbsent makes the Set create-only: it fails with ErrConflict when a
	// live ref has the name.
	IfAbsent bool
	// IfVersion, when not 0, makes the Set a compare-and-swap: it fails
	// with ErrConflict unless the live ref's version is IfVersion.
	IfVersion int64
	// TTL, when not 0, makes the ref expire TTL after the Set (renewed by
	// Touch); it must then be at least a microsecond. Defaults to 0, the
	// field left out: the ref never expires. A caller that reads a TTL
	// given explicitly checks it with CheckTTL, which refuses 0.
	TTL time.Duration
	// Annotation is attached to the ref, at most MaxAnnotation bytes.
	Annotation []byte
	// Weak makes the ref name key without keeping it: a sweep or Delete
	// may remove key, and then removes the ref with it. A Set without
	// Weak over a weak ref makes it strong, with the same guarantee as any
	// strong Set. Defaults to false: the ref keeps key.
	Weak bool
}

// Set points the ref name at key, which must be stored (else ErrNotFound:
// a sweep may have collected it; put it again), and returns the ref with
// its new version. From the moment Set returns, key is kept while the ref
// is live (unless opts.Weak): no pin is needed between a Put and the Set
// that names it, as long as the put's pin lasts. A weak Set is refused
// just the same for a key not stored, so a weak ref never names a blob
// already gone. Errors: ErrInvalidName, ErrInvalidKey,
// ErrInvalidArgument (a bad TTL or option, an annotation too long),
// ErrConflict (IfAbsent or IfVersion not met); nothing changes then.
func (s *Store) Set(ctx context.Context, name string, key blob.Key, opts SetOptions) (Ref, error) {
	p, err := s.setParams(name, opts)
	if err == nil && key.IsZero() {
		err = fmt.Errorf("%w: zero key", steaderr.ErrInvalidKey)
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return Ref{}, fmt.Errorf("ref set %.80q: %w", name, err)
	}
	p.Key = key
	r, err := s.eng.Set(ctx, p)
	if err != nil {
		return Ref{}, fmt.Errorf("ref set %.80q: %w", name, err)
	}
	return r, nil
}

// setParams checks a Set of name with opts and returns its SetParams,
// all but the key.
func (s *Store) setParams(name string, opts SetOptions) (SetParams, error) {
	p := SetParams{Name: name, Version: opts.IfVersion, Weak: opts.Weak, Now: s.clock()}
	err := CheckName(name)
	switch {
	case err != nil:
	case len(opts.Annotation) > MaxAnnotation:
		err = fmt.Errorf("%w: annotation is %d bytes, at most %d", steaderr.ErrInvalidArgument, len(opts.Annotation), MaxAnnotation)
	case opts.IfVersion < 0:
		err = fmt.Errorf("%w: IfVersion %d", steaderr.ErrInvalidArgument, opts.IfVersion)
	case opts.IfAbsent && opts.IfVersion != 0:
		err = fmt.Errorf("%w: IfAbsent and IfVersion together", steaderr.ErrInvalidArgument)
	}
	if err == nil {
		p.TTL, err = checkTTL(opts.TTL, true)
	}
	if err != nil {
		return SetParams{}, err
	}
	switch {
	case opts.IfAbsent:
		p.Cond = IfAbsent
	case opts.IfVersion != 0:
		p.Cond = IfVersion
	}
	if len(opts.Annotation) > 0 {
		p.Annotation = bytes.Clone(opts.Annotation)
	}
	return p, nil
}

// Get returns the live ref name, or an error wrapping ErrNotFound (also
// once it expired, and for a weak ref once its key was collected).
func (s *Store) Get(ctx context.Context, name string) (Ref, error) {
	if err := checkCall(ctx, name); err != nil {
		return Ref{}, fmt.Errorf("ref get %.80q: %w", name, err)
	}
	r, err := s.eng.Get(ctx, GetParams{Name: name, Now: s.clock()})
	if err != nil {
		return Ref{}, fmt.Errorf("ref get %.80q: %w", name, err)
	}
	return r, nil
}

// Touch renews the live, expiring ref name to expire ttl from now, keeping
// its version, and returns it; a ref without expiry is returned as it is.
// An absent or expired ref is an error wrapping ErrNotFound: Touch never
// resurrects one.
func (s *Store) Touch(ctx context.Context, name string, ttl time.Duration) (Ref, error) {
	ttl, err := checkTTL(ttl, false)
	if err == nil {
		err = checkCall(ctx, name)
	}
	if err != nil {
		return Ref{}, fmt.Errorf("ref touch %.80q: %w", name, err)
	}
	r, err := s.eng.Touch(ctx, TouchParams{Name: name, TTL: ttl, Now: s.clock()})
	if err != nil {
		return Ref{}, fmt.Errorf("ref touch %.80q: %w", name, err)
	}
	return r, nil
}

// GetTouch is Get for a cache's read path: it returns the live ref name
// and, when it expires in less than half of ttl, renews it to expire ttl
// from now, so an entry read often stays and one nobody reads goes, at one
// write per half ttl rather than one per read.
func (s *Store) GetTouch(ctx context.Context, name string, ttl time.Duration) (Ref, error) {
	ttl, err := checkTTL(ttl, false)
	if err != nil {
		return Ref{}, fmt.Errorf("ref get %.80q: %w", name, err)
	}
	err = checkCall(ctx, name)
	var r Ref
	if err == nil {
		// The engine judges what is left on its own clock, the one
		// expiry is judged by.
		r, err = s.eng.Touch(ctx, TouchParams{Name: name, TTL: ttl, Now: s.clock(), Lazy: true})
	}
	if err != nil {
		return Ref{}, fmt.Errorf("ref get %.80q: %w", name, err)
	}
	return r, nil
}

// Delete removes the live ref name, only if its version is ifVersion when
// ifVersion is not 0 (else ErrConflict). An absent or expired ref is an
// error wrapping ErrNotFound. The key it named is no longer kept by it:
// a later sweep may collect it.
func (s *Store) Delete(ctx context.Context, name string, ifVersion int64) error {
	err := checkCall(ctx, name)
	if err == nil && ifVersion < 0 {
		err = fmt.Errorf("%w: version %d", steaderr.ErrInvalidArgument, ifVersion)
	}
	if err == nil {
		err = s.eng.Delete(ctx, DeleteParams{Name: name, Version: ifVersion, Now: s.clock()})
	}
	if err != nil {
		return fmt.Errorf("ref delete %.80q: %w", name, err)
	}
	return nil
}

// List returns up to limit live refs whose names start with prefix and
// sort after after (bytewise), in name order. Pass the last name of one
// page as after to get the next; an empty page is the end.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]Ref, error) {
	if err := checkList(ctx, prefix, after, limit); err != nil {
		return nil, fmt.Errorf("ref list: %w", err)
	}
	var page []Ref
	err := s.eng.List(ctx, ListParams{Prefix: prefix, After: after, Limit: limit, Now: s.clock()}, func(r Ref) bool {
		page = append(page, r)
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("ref list: %w", err)
	}
	return page, nil
}

// All yields every live ref whose name starts with prefix, in name order,
// a page at a time, holding nothing of the engine's while the loop body
// runs. Every ref live for the whole walk is yielded exactly once; one set
// or deleted meanwhile may or may not be. An error is yielded once, last.
func (s *Store) All(ctx context.Context, prefix string) iter.Seq2[Ref, error] {
	return func(yield func(Ref, error) bool) {
		if err := checkList(ctx, prefix, "", 1); err != nil {
			yield(Ref{}, fmt.Errorf("ref list: %w", err))
			return
		}
		after := ""
		for {
			page, err := s.List(ctx, prefix, after, DefaultPageSize)
			if err != nil {
				yield(Ref{}, err)
				return
			}
			for _, r := range page {
				if !yield(r, nil) {
					return
				}
			}
			if len(page) < DefaultPageSize {
				return
			}
			after = page[len(page)-1].Name
		}
	}
}

func (s *Store) clock() time.Time {
	if s.now == nil {
		return time.Time{}
	}
	return s.now().Truncate(time.Microsecond)
}

func checkCall(ctx context.Context, name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	return ctx.Err()
}

func checkList(ctx context.Context, prefix, after string, limit int) error {
	if err := CheckPrefix(prefix); err != nil {
		return err
	}
	if err := CheckPrefix(after); err != nil {
		return err
	}
	if limit <= 0 {
		return fmt.Errorf("%w: limit %d, want > 0", steaderr.ErrInvalidArgument, limit)
	}
	return ctx.Err()
}
