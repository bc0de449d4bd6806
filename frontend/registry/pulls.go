package registry

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// maxPullMemo bounds the manifests whose last recorded pull a Registry
// remembers; past it the memory starts afresh.
const maxPullMemo = 10000

// pullMemo is the last pull time notePull recorded (or found recorded)
// per repository and manifest.
type pullMemo struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (m *pullMemo) get(k string) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.last[k]
	return t, ok
}

func (m *pullMemo) forget(k string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.last, k)
}

func (m *pullMemo) set(k string, t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last == nil || len(m.last) >= maxPullMemo {
		m.last = map[string]time.Time{}
	}
	m.last[k] = t
}

// notePull records that the manifest rf names (rf being its tag or its
// manifest link) was pulled from repo at at, in the Pulled of its
// manifest link, for retention's KeepPulledWithin. It writes only when
// the pull recorded is older than half of stead.PullResolution, as a
// compare-and-swap of the link, so a Registry remembering what it
// recorded reads and writes nothing for most pulls, and concurrent pulls
// from several stores write once. A link deleted meanwhile is not
// written again; a link whose annotation is not the registry's is left
// alone.
func (g *Registry) notePull(ctx context.Context, repo string, rf ref.Ref, at time.Time) error {
	at = at.UTC()
	name := manifestRef(repo, rf.Key)
	if last, ok := g.pulls.get(name); ok && at.Sub(last) < stead.PullResolution/2 {
		return nil
	}
	fresh := rf.Name != name // a tag: read the link
	for range 3 {
		if fresh {
			var err error
			rf, err = g.st.Refs.Get(ctx, name)
			if errors.Is(err, steaderr.ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
		}
		fresh = true
		var l link
		if json.Unmarshal(rf.Annotation, &l) != nil || l.Descriptor.MediaType == "" {
			return nil
		}
		if at.Sub(l.Pulled) < stead.PullResolution/2 {
			g.pulls.set(name, l.Pulled)
			return nil
		}
		l.Pulled = at
		_, err := g.st.Refs.Set(ctx, name, rf.Key, ref.SetOptions{Annotation: l.encode(), IfVersion: rf.Version})
		switch {
		case err == nil:
			g.pulls.set(name, at)
			return nil
		case errors.Is(err, steaderr.ErrConflict):
			continue // changed meanwhile: read it again
		case errors.Is(err, steaderr.ErrNotFound):
			return nil // the manifest collected meanwhile
		default:
			return err
		}
	}
	return nil
}

// linkManifest sets the link of manifest d in repo to l, keeping the last
// pull its link recorded: a compare-and-swap on the link read, so a pull
// noted meanwhile is read again, not overwritten.
func (g *Registry) linkManifest(ctx context.Context, repo string, d blob.Key, l link) error {
	name := manifestRef(repo, d)
	g.pulls.forget(name)
	opts := ref.SetOptions{IfAbsent: true} // a new link: one round trip
	l.Pulled = time.Time{}
	for {
		opts.Annotation = l.encode()
		_, err := g.st.Refs.Set(ctx, name, d, opts)
		if !errors.Is(err, steaderr.ErrConflict) {
			return err
		}
		cur, err := g.st.Refs.Get(ctx, name)
		switch {
		case errors.Is(err, steaderr.ErrNotFound):
			opts, l.Pulled = ref.SetOptions{IfAbsent: true}, time.Time{}
		case err != nil:
			return err
		default:
			opts, l.Pulled = ref.SetOptions{IfVersion: cur.Version}, decodeLink(cur).Pulled
		}
	}
}
