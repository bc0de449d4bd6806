package buildcache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// The size budget (Options.MaxSize, docs/guides/build-cache.md): Evict
// reads every entry under RefPrefix, adds up the distinct blobs they
// keep (content, results with their outputs and output trees' files,
// the lists keeping them together, keyed entries) and the bytes of the
// ByteStream uploads in progress, and deletes the least recently read
// entries until what the rest keep and the uploads fit the budget. The
// sweep that follows frees what no live entry keeps any more.

// RefPrefix begins the name of every ref the build cache keeps: every
// entry of every protocol, and its uploads. The budget is the whole
// cache's.
const RefPrefix = "cache/"

// maxRecent bounds the entries whose last read is remembered in memory;
// past it the memory starts afresh and the refs' expiries order the rest.
const maxRecent = 1 << 20

// recency remembers when entries were last read in this process, so a
// read renews an entry's place without a write (GetTouch writes once per
// half TTL, which alone would order entries only to half a TTL).
type recency struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (r *recency) read(name string, at time.Time) {
	r.mu.Lock()
	if len(r.last) >= maxRecent {
		r.last = nil
	}
	if r.last == nil {
		r.last = map[string]time.Time{}
	}
	r.last[name] = at
	r.mu.Unlock()
}

func (r *recency) get(name string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last[name]
}

// touch reads the live entry name, renewing it (ref.GetTouch: a write per
// half TTL), and remembers the read for the size budget.
func (c *Cache) touch(ctx context.Context, name string) (ref.Ref, error) {
	rf, err := c.st.Refs.GetTouch(ctx, name, c.opts.TTL)
	if err == nil {
		c.recent.read(name, c.opts.Now())
	}
	return rf, err
}

// EvictReport is what one Evict did.
type EvictReport struct {
	// Entries counts the live entries read; Bytes is what they kept,
	// each distinct blob counted once, before eviction.
	Entries, Bytes int64
	// Uploads is the bytes the ByteStream uploads in progress hold,
	// counted against the budget, never evicted.
	Uploads int64
	// Evicted counts the entries deleted, and Freed the bytes that only
	// they kept, which the sweeps that follow free.
	Evicted, Freed int64
}

// Evict deletes the least recently read entries until the blobs the
// others keep and the uploads in progress add up to at most
// Options.MaxSize bytes; with no MaxSize it does nothing. Uploads are
// counted, not evicted: while they alone are over the budget, every
// entry goes. An entry's place is its last read in this process, or
// when it was last written or renewed (its expiry less TTL), whichever is
// later. A blob is counted while any remaining entry keeps it, so a
// result's outputs count, and go, with the last result or content entry
// keeping them. An entry written again meanwhile (a new version) is kept.
// Sizes are exact for the entries read; what is written during the pass
// is counted at the next one.
func (c *Cache) Evict(ctx context.Context) (EvictReport, error) {
	var rep EvictReport
	if c.opts.MaxSize <= 0 {
		return rep, nil
	}
	type entry struct {
		rf    ref.Ref
		place time.Time
		blobs []blob.Key
	}
	var entries []entry
	holders := map[blob.Key]int{}
	sizes := map[blob.Key]int64{}
	for rf, err := range c.st.Refs.All(ctx, RefPrefix) {
		if err != nil {
			return rep, fmt.Errorf("build cache evict: %w", err)
		}
		if strings.HasPrefix(rf.Name, uploadPrefix) {
			n, err := c.uploadBytes(ctx, rf)
			if err != nil {
				return rep, fmt.Errorf("build cache evict: %s: %w", rf.Name, err)
			}
			rep.Uploads += n
			continue // an upload in progress, not an entry
		}
		blobs, err := c.kept(ctx, rf)
		if err != nil {
			return rep, fmt.Errorf("build cache evict: %s: %w", rf.Name, err)
		}
		place := rf.Expiry.Add(-c.opts.TTL)
		if last := c.recent.get(rf.Name); last.After(place) {
			place = last
		}
		for _, k := range blobs {
			if holders[k]++; holders[k] == 1 {
				size, err := c.sizeOf(ctx, k)
				if err != nil {
					return rep, fmt.Errorf("build cache evict: %w", err)
				}
				sizes[k] = size
				rep.Bytes += size
			}
		}
		entries = append(entries, entry{rf: rf, place: place, blobs: blobs})
	}
	rep.Entries = int64(len(entries))
	c.prune(sizes)
	if rep.Bytes+rep.Uploads <= c.opts.MaxSize {
		return rep, nil
	}
	slices.SortStableFunc(entries, func(a, b entry) int { return a.place.Compare(b.place) })
	left := rep.Bytes + rep.Uploads
	for _, e := range entries {
		if left <= c.opts.MaxSize {
			break
		}
		err := c.st.Refs.Delete(ctx, e.rf.Name, e.rf.Version)
		if errors.Is(err, steaderr.ErrNotFound) || errors.Is(err, steaderr.ErrConflict) {
			continue // expired, deleted or written again meanwhile
		}
		if err != nil {
			return rep, fmt.Errorf("build cache evict: %w", err)
		}
		rep.Evicted++
		for _, k := range e.blobs {
			if holders[k]--; holders[k] == 0 {
				left -= sizes[k]
				rep.Freed += sizes[k]
			}
		}
	}
	if rep.Evicted > 0 {
		c.log.Info("build cache: evicted least recently read entries", "budget", c.opts.MaxSize,
			"bytes", rep.Bytes, "uploads", rep.Uploads, "evicted", rep.Evicted, "freed", rep.Freed)
	}
	return rep, nil
}

// uploadBytes returns the bytes the upload rf names holds: its committed
// size, or once its commit has begun the size it recorded; 0 for an
// upload ended.
func (c *Cache) uploadBytes(ctx context.Context, rf ref.Ref) (int64, error) {
	state, err := parseUploadState(rf.Annotation)
	if err != nil {
		return 0, nil // it names no upload
	}
	// Only an upload in progress holds bytes of its own: one ended has
	// been committed (its bytes a blob, counted once kept as content) or
	// discarded, whether or not its commit was recorded begun.
	up, err := c.st.Blobs.ResumeUpload(ctx, state.id, blob.UploadOptions{Owner: uploadOwner})
	if errors.Is(err, steaderr.ErrLost) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return up.Size(), nil
}

// kept returns the blobs entry rf keeps: its own, and for an action
// result its outputs, the files of its output trees and the lists
// keeping them together. What a result blob keeps is remembered by its
// key, which names its content.
func (c *Cache) kept(ctx context.Context, rf ref.Ref) ([]blob.Key, error) {
	if !isResult(rf.Name) {
		return []blob.Key{rf.Key}, nil
	}
	c.memo.mu.Lock()
	blobs, ok := c.memo.kept[rf.Key]
	c.memo.mu.Unlock()
	if ok {
		return blobs, nil
	}
	blobs = []blob.Key{rf.Key}
	body, err := c.readBlob(ctx, rf.Key, MaxActionResult)
	if errors.Is(err, steaderr.ErrNotFound) {
		return blobs, nil
	}
	if err != nil {
		return nil, err
	}
	if res := parseResult(body); res != nil {
		keys, _, err := c.outputs(ctx, res, func(context.Context, blob.Key) (bool, error) { return true, nil })
		if errors.Is(err, steaderr.ErrInvalidArgument) || errors.Is(err, steaderr.ErrTooLarge) {
			keys, err = nil, nil // a result never served: it keeps only itself
		}
		if err != nil {
			return nil, err
		}
		blobs = append(blobs, keys...)
		lists, _ := listsOf(keys)
		for _, l := range lists {
			blobs = append(blobs, blob.KeyOf(l.content))
		}
	}
	c.memo.mu.Lock()
	c.memo.kept[rf.Key] = blobs
	c.memo.mu.Unlock()
	return blobs, nil
}

func isResult(name string) bool { return strings.HasPrefix(name, acRef("")) }

// sizeOf returns the stored size of k, 0 when it is not stored (an
// output swept meanwhile); sizes are remembered by key.
func (c *Cache) sizeOf(ctx context.Context, k blob.Key) (int64, error) {
	c.memo.mu.Lock()
	size, ok := c.memo.size[k]
	c.memo.mu.Unlock()
	if ok {
		return size, nil
	}
	info, err := c.st.Blobs.Stat(ctx, k)
	if errors.Is(err, steaderr.ErrNotFound) {
		return 0, nil // not remembered: it may be stored again
	}
	if err != nil {
		return 0, err
	}
	c.memo.mu.Lock()
	c.memo.size[k] = info.Size
	c.memo.mu.Unlock()
	return info.Size, nil
}

// prune forgets what is remembered of blobs no entry keeps any more.
func (c *Cache) prune(live map[blob.Key]int64) {
	c.memo.mu.Lock()
	defer c.memo.mu.Unlock()
	for k := range c.memo.size {
		if _, ok := live[k]; !ok {
			delete(c.memo.size, k)
		}
	}
	for k := range c.memo.kept {
		if _, ok := live[k]; !ok {
			delete(c.memo.kept, k)
		}
	}
}

// evictMemo remembers, across Evict passes, what content-addressed blobs
// keep and weigh, which never changes for a key.
type evictMemo struct {
	mu   sync.Mutex
	kept map[blob.Key][]blob.Key
	size map[blob.Key]int64
}
