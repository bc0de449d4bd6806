package stead

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// MaxUsageRefs bounds the refs one Usage reads: a larger prefix is
// reported Truncated, its counts covering the first MaxUsageRefs refs.
const MaxUsageRefs = 100 * ref.DefaultPageSize

// Usage is what the live refs under a prefix hold.
type Usage struct {
	Prefix string
	// Refs counts the live refs read (strong and weak).
	Refs int64
	// Blobs counts the distinct stored blobs they name, and Bytes their
	// sizes: content several refs name is counted once.
	Blobs, Bytes int64
	// ReferencedBytes sums the size of each ref's blob, a blob counted
	// once per ref naming it; DedupSavedBytes is ReferencedBytes - Bytes,
	// what storing each blob once saved within the prefix.
	ReferencedBytes, DedupSavedBytes int64
	// Truncated reports that the prefix has more than MaxUsageRefs refs:
	// the counts cover the first MaxUsageRefs in name order.
	Truncated bool
	// LastPush and LastPull are the last push and pull noted under the
	// prefix (NotePush, NotePull: the registry notes each repository's);
	// zero when none was. LastPull is exact to PullResolution/2.
	LastPush, LastPull time.Time
}

// Usage reports what the live refs whose names start with prefix hold: a
// registry repository ("oci/team/app/_"), a cache namespace ("cache/"),
// any ref prefix. It reads the refs a page at a time and looks up each
// distinct blob once by key: ⌈refs/ref.DefaultPageSize⌉ list statements
// and one lookup per distinct blob, at most MaxUsageRefs refs. A blob
// referenced only by a blob (a layer under a manifest) counts when a ref
// names it too (the registry links every layer to its repository). The
// last push and pull are one more lookup.
func (s *Store) Usage(ctx context.Context, prefix string) (Usage, error) {
	u := Usage{Prefix: prefix}
	a, err := s.activityOf(ctx, prefix)
	if err != nil {
		return Usage{}, err
	}
	u.LastPush, u.LastPull = a.Push, a.Pull
	seen := map[blob.Key]int64{} // size of each blob named
	for r, err := range s.Refs.All(ctx, prefix) {
		if err != nil {
			return Usage{}, fmt.Errorf("usage: %w", err)
		}
		if u.Refs == MaxUsageRefs {
			u.Truncated = true
			break
		}
		u.Refs++
		size, ok := seen[r.Key]
		if !ok {
			info, err := s.Blobs.Stat(ctx, r.Key)
			switch {
			case errors.Is(err, steaderr.ErrNotFound):
				size = -1 // a weak ref's blob collected meanwhile
			case err != nil:
				return Usage{}, fmt.Errorf("usage: %w", err)
			default:
				size = info.Size
				u.Blobs++
				u.Bytes += size
			}
			seen[r.Key] = size
		}
		if size > 0 {
			u.ReferencedBytes += size
		}
	}
	u.DedupSavedBytes = u.ReferencedBytes - u.Bytes
	return u, nil
}

// PullResolution is how exact a recorded last pull is: NotePull writes
// only when the pull recorded is older than half of it, so a prefix
// pulled all day costs a write per half hour and process, not per pull.
const PullResolution = time.Hour

// maxPullMemo bounds the prefixes whose last recorded pull a Store
// remembers; past it the memory starts afresh.
const maxPullMemo = 10000

// activity is the annotation of an activity ref.
type activity struct {
	Push time.Time `json:"push,omitzero"`
	Pull time.Time `json:"pull,omitzero"`
}

// activityRef names the ref that holds the last push and pull of the refs
// under prefix: outside every front end's names ("_activity/"), the
// prefix ending in "@" so that "cache" and "cache/" stay apart.
func activityRef(prefix string) string { return "_activity/" + prefix + "@" }

// pullMemo is the last pull time NotePull recorded per prefix.
type pullMemo struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// NotePush records that key was pushed under prefix at at (a registry
// repository's manifest), for Usage's LastPush. It writes one ref,
// "_activity/<prefix>@", weak on key (so it keeps nothing and goes when
// key is collected, until the next push or pull writes it again), its
// annotation the times. A key not stored is no error: nothing is noted.
func (s *Store) NotePush(ctx context.Context, prefix string, key blob.Key, at time.Time) error {
	return s.noteActivity(ctx, prefix, key, func(a *activity) bool {
		a.Push = at.UTC()
		return true
	})
}

// NotePull records that key was pulled under prefix at at, for Usage's
// LastPull, writing only when the pull recorded is older than half of
// PullResolution: a Store remembers what it recorded, so most pulls read
// and write nothing. Concurrent notes may lose one another's time by
// less than PullResolution.
func (s *Store) NotePull(ctx context.Context, prefix string, key blob.Key, at time.Time) error {
	at = at.UTC()
	s.pulls.mu.Lock()
	last, ok := s.pulls.last[prefix]
	s.pulls.mu.Unlock()
	if ok && at.Sub(last) < PullResolution/2 {
		return nil
	}
	err := s.noteActivity(ctx, prefix, key, func(a *activity) bool {
		if at.Sub(a.Pull) < PullResolution/2 {
			at = a.Pull
			return false
		}
		a.Pull = at
		return true
	})
	if err == nil {
		s.pulls.mu.Lock()
		if s.pulls.last == nil || len(s.pulls.last) >= maxPullMemo {
			s.pulls.last = map[string]time.Time{}
		}
		s.pulls.last[prefix] = at
		s.pulls.mu.Unlock()
	}
	return err
}

// noteActivity reads prefix's activity ref, lets change amend it, and
// writes it back unless change says no, as a compare-and-swap retried a
// few times.
func (s *Store) noteActivity(ctx context.Context, prefix string, key blob.Key, change func(*activity) bool) error {
	name := activityRef(prefix)
	for range 3 {
		var a activity
		var version int64
		switch r, err := s.Refs.Get(ctx, name); {
		case errors.Is(err, steaderr.ErrNotFound):
		case err != nil:
			return fmt.Errorf("note activity: %w", err)
		default:
			_ = json.Unmarshal(r.Annotation, &a) // a foreign annotation reads as none
			version = r.Version
		}
		if !change(&a) {
			return nil
		}
		ann, _ := json.Marshal(a)
		opts := ref.SetOptions{Annotation: ann, Weak: true, IfVersion: version, IfAbsent: version == 0}
		_, err := s.Refs.Set(ctx, name, key, opts)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, steaderr.ErrConflict):
			continue // another note won: read it again
		case errors.Is(err, steaderr.ErrNotFound):
			return nil // key collected meanwhile: nothing to note by
		default:
			return fmt.Errorf("note activity: %w", err)
		}
	}
	return nil
}

// activityOf reads the last push and pull noted under prefix: one
// lookup; zero times when none was noted or the prefix cannot name one.
func (s *Store) activityOf(ctx context.Context, prefix string) (activity, error) {
	var a activity
	name := activityRef(prefix)
	if ref.CheckName(name) != nil {
		return a, nil
	}
	r, err := s.Refs.Get(ctx, name)
	switch {
	case errors.Is(err, steaderr.ErrNotFound):
		return a, nil
	case err != nil:
		return a, fmt.Errorf("usage: %w", err)
	}
	_ = json.Unmarshal(r.Annotation, &a)
	return a, nil
}
