// Package check holds the rules of record.Backend's conditional writes, for
// engine authors, outside this module too
// (docs/decisions/0024-engine-api-for-third-parties.md): an engine decides
// a write with them, or explains with them why a conditional statement
// matched no row. Users of records never need it.
package check

import (
	"fmt"
	"time"

	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/steaderr"
)

// In every function stored is the stored record and exists whether there
// is one. A nil error means the write may proceed.

// Save decides whether Save may write rec over stored.
func Save(rec, stored record.Record, exists bool) error {
	if rec.Version == 0 {
		if exists {
			return fmt.Errorf("%w: create of an existing record (stored version %d)", steaderr.ErrConflict, stored.Version)
		}
		return nil
	}
	switch {
	case !exists:
		return fmt.Errorf("%w: update of an absent record (version %d given)", steaderr.ErrConflict, rec.Version)
	case stored.Group != rec.Group:
		return fmt.Errorf("%w: the record is in group %q, not %q", steaderr.ErrWrongGroup, stored.Group, rec.Group)
	case stored.Version != rec.Version:
		return fmt.Errorf("%w: stored version %d, version %d given", steaderr.ErrConflict, stored.Version, rec.Version)
	case rec.Lease.Owner != "" && (rec.Lease.Owner != stored.Lease.Owner || rec.Lease.Incarnation != stored.Lease.Incarnation):
		return fmt.Errorf("%w: lease of %q (incarnation %d) given, %q (incarnation %d) stored: only Claim takes a lease; an empty owner releases it",
			steaderr.ErrConflict, rec.Lease.Owner, rec.Lease.Incarnation, stored.Lease.Owner, stored.Lease.Incarnation)
	}
	return nil
}

// Claim decides whether owner may claim stored, in group, at now.
func Claim(group, owner string, now time.Time, stored record.Record, exists bool) error {
	switch {
	case !exists:
		return steaderr.ErrNotFound
	case stored.Group != group:
		return fmt.Errorf("%w: the record is in group %q, not %q", steaderr.ErrWrongGroup, stored.Group, group)
	case stored.Lease.Owner != owner && stored.Lease.Held(now):
		return fmt.Errorf("%w: %q holds it until %v", steaderr.ErrLeased, stored.Lease.Owner, stored.Lease.Expiry)
	}
	return nil
}

// Renew decides whether p may renew the lease on stored.
func Renew(p record.RenewParams, stored record.Record, exists bool) error {
	switch {
	case !exists:
		return steaderr.ErrNotFound
	case stored.Group != p.Group:
		return fmt.Errorf("%w: the record is in group %q, not %q", steaderr.ErrWrongGroup, stored.Group, p.Group)
	case stored.Lease.Owner == p.Owner && stored.Lease.Incarnation == p.Incarnation:
		return nil
	case stored.Lease.Held(p.Now):
		return fmt.Errorf("%w: %q holds it (incarnation %d) until %v", steaderr.ErrLeased, stored.Lease.Owner, stored.Lease.Incarnation, stored.Lease.Expiry)
	}
	return fmt.Errorf("%w: the lease of %q (incarnation %d) was released or claimed again: %q (incarnation %d) is stored",
		steaderr.ErrConflict, p.Owner, p.Incarnation, stored.Lease.Owner, stored.Lease.Incarnation)
}
