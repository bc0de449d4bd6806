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

// lastPull returns the last pull recorded in the link of manifest d in
// repo, zero when none is.
func (g *Registry) lastPull(ctx context.Context, repo string, d blob.Key) (time.Time, error) {
	rf, err := g.st.Refs.Get(ctx, manifestRef(repo, d))
	if errors.Is(err, steaderr.ErrNotFound) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	return decodeLink(rf).Pulled, nil
}
