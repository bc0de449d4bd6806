package registry

import (
	"context"
	"errors"
	"strings"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/steaderr"
)

// Collected is what one Collect did.
type Collected struct {
	// Manifests counts the untagged manifests deleted.
	Manifests int
}

// manifestInfo is what Collect reads of one linked manifest.
type manifestInfo struct {
	link     link
	tagged   bool
	subjects []blob.Key // from its referrer entries
}

// Collect applies the registry's collection policy (Options), each
// deletion logged: with DeleteUntaggedAfter, a manifest pushed longer ago
// than it is deleted (as DELETE by digest would) when no tag names it, no
// kept index lists it, and it refers to no kept subject. What it alone
// kept then goes at the following sweeps. It reads the registry's refs a
// page at a time and holds one entry per manifest; an index's children
// are read from the index. With no policy it does nothing.
func (g *Registry) Collect(ctx context.Context) (Collected, error) {
	var done Collected
	if g.opts.DeleteUntaggedAfter <= 0 {
		return done, nil
	}
	cutoff := g.opts.Now().Add(-g.opts.DeleteUntaggedAfter)
	repos := map[string]map[blob.Key]*manifestInfo{}
	info := func(repo string, k blob.Key) *manifestInfo {
		ms := repos[repo]
		if ms == nil {
			ms = map[blob.Key]*manifestInfo{}
			repos[repo] = ms
		}
		m := ms[k]
		if m == nil {
			m = &manifestInfo{}
			ms[k] = m
		}
		return m
	}
	for rf, err := range g.st.Refs.All(ctx, "oci/") {
		if err != nil {
			return done, err
		}
		repo, kind, item, ok := splitRef(rf.Name)
		if !ok {
			continue
		}
		switch kind {
		case "manifests":
			info(repo, rf.Key).link = decodeLink(rf)
		case "tags":
			info(repo, rf.Key).tagged = true
		case "referrers":
			subject, _, _ := strings.Cut(item, "/")
			if s, e := parseDigest(subject); e == nil {
				m := info(repo, rf.Key)
				m.subjects = append(m.subjects, s)
			}
		}
	}
	for repo, ms := range repos {
		kept, err := g.keptManifests(ctx, ms)
		if err != nil {
			return done, err
		}
		for k, m := range ms {
			if kept[k] || m.link.Pushed.IsZero() || m.link.Pushed.After(cutoff) {
				continue
			}
			if err := g.removeManifest(ctx, repo, k); err != nil {
				return done, err
			}
			done.Manifests++
			g.log.Info("registry: deleted an untagged manifest", "repository", repo, "digest", k.String(), "pushed", m.link.Pushed)
		}
	}
	return done, nil
}

// keptManifests returns the manifests of one repository that a tag keeps:
// the tagged ones, the children of a kept index and the referrers of a
// kept subject, to a fixed point.
func (g *Registry) keptManifests(ctx context.Context, ms map[blob.Key]*manifestInfo) (map[blob.Key]bool, error) {
	kept := map[blob.Key]bool{}
	var queue []blob.Key
	keep := func(k blob.Key) {
		if _, ok := ms[k]; ok && !kept[k] {
			kept[k] = true
			queue = append(queue, k)
		}
	}
	for k, m := range ms {
		if m.tagged {
			keep(k)
		}
	}
	referrers := map[blob.Key][]blob.Key{} // subject -> referrers
	for k, m := range ms {
		for _, s := range m.subjects {
			referrers[s] = append(referrers[s], k)
		}
	}
	for len(queue) > 0 {
		k := queue[0]
		queue = queue[1:]
		for _, r := range referrers[k] {
			keep(r)
		}
		if !isIndex(ms[k].link.Descriptor.MediaType) {
			continue
		}
		doc, err := g.readDoc(ctx, k)
		if errors.Is(err, steaderr.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, d := range doc.Manifests {
			if c, e := parseDigest(string(d.Digest)); e == nil {
				keep(c)
			}
		}
	}
	return kept, nil
}

// splitRef splits a registry ref's name, "oci/<repo>/_<kind>/<item>", at
// its first "/_" (no repository name component starts with '_').
func splitRef(name string) (repo, kind, item string, ok bool) {
	rest, ok := strings.CutPrefix(name, "oci/")
	if !ok {
		return "", "", "", false
	}
	i := strings.Index(rest, "/_")
	if i < 0 {
		return "", "", "", false
	}
	kind, item, ok = strings.Cut(rest[i+2:], "/")
	return rest[:i], kind, item, ok
}
