package registry

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// CollectOptions are the options of one Collect.
type CollectOptions struct {
	// DryRun deletes nothing: Collected lists what would go.
	DryRun bool
}

// Collected is what one Collect deleted (in a dry run: would delete).
type Collected struct {
	Deleted []Deletion
}

// Deletion is a tag or an untagged manifest Collect deleted.
type Deletion struct {
	Repository string
	// Tag is the tag deleted; "" for an untagged manifest.
	Tag    string
	Digest string
	Pushed time.Time
	// Reason says which rule let it go.
	Reason string
}

// manifestInfo is what Collect reads of one linked manifest.
type manifestInfo struct {
	link     link
	version  int64 // the link's
	tags     int
	subjects []blob.Key // from its referrer entries
	entries  []ref.Ref  // its referrer entries, as listed
}

// tagInfo is what Collect reads of one tag.
type tagInfo struct {
	name    string
	key     blob.Key
	version int64
	pushed  time.Time
	pulled  time.Time // its manifest's last pull in the repository
}

// Collect applies the registry's policies (Options.Retention and
// DeleteUntaggedAfter), each deletion logged: first the tags a rule does
// not keep, then the untagged manifests pushed longer ago than the
// repository's untagged period, deleted as DELETE by digest would, unless
// a kept index lists one or it refers to a kept subject. What they alone
// kept goes at the following sweeps. It reads the registry's refs once, a
// page at a time, holding one entry per manifest and tag; an index's
// children are read from the index.
func (g *Registry) Collect(ctx context.Context, opts CollectOptions) (Collected, error) {
	var done Collected
	if g.opts.Retention == nil && g.opts.DeleteUntaggedAfter <= 0 {
		return done, nil
	}
	now := g.opts.Now()
	type repoInfo struct {
		manifests map[blob.Key]*manifestInfo
		tags      []tagInfo
	}
	repos := map[string]*repoInfo{}
	info := func(repo string, k blob.Key) (*repoInfo, *manifestInfo) {
		ri := repos[repo]
		if ri == nil {
			ri = &repoInfo{manifests: map[blob.Key]*manifestInfo{}}
			repos[repo] = ri
		}
		m := ri.manifests[k]
		if m == nil {
			m = &manifestInfo{}
			ri.manifests[k] = m
		}
		return ri, m
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
			_, m := info(repo, rf.Key)
			m.link, m.version = decodeLink(rf), rf.Version
		case "tags":
			ri, m := info(repo, rf.Key)
			m.tags++
			ri.tags = append(ri.tags, tagInfo{name: item, key: rf.Key, version: rf.Version, pushed: decodeLink(rf).Pushed})
		case "referrers":
			subject, _, _ := strings.Cut(item, "/")
			if s, e := parseDigest(subject); e == nil {
				_, m := info(repo, rf.Key)
				m.subjects = append(m.subjects, s)
				m.entries = append(m.entries, rf)
			}
		}
	}
	record := func(d Deletion) {
		done.Deleted = append(done.Deleted, d)
		msg := "registry: deleted"
		if opts.DryRun {
			msg = "registry: would delete (dry run)"
		}
		g.log.Info(msg, "repository", d.Repository, "tag", d.Tag, "digest", d.Digest, "pushed", d.Pushed, "reason", d.Reason)
	}
	for _, repo := range slices.Sorted(maps.Keys(repos)) {
		ri := repos[repo]
		rule := g.opts.Retention.rule(repo)
		if rule.prunesTags() {
			for i, t := range ri.tags {
				if m := ri.manifests[t.key]; m != nil {
					ri.tags[i].pulled = m.link.Pulled
				}
			}
			for _, t := range pruned(rule, ri.tags, now) {
				if rule.KeepPulledWithin > 0 {
					// The listing may be minutes old: a pull since keeps the tag.
					pulled, err := g.pulledWithin(ctx, repo, t.key, now.Add(-rule.KeepPulledWithin))
					if err != nil {
						return done, err
					}
					if pulled {
						continue
					}
				}
				if !opts.DryRun {
					err := g.st.Refs.Delete(ctx, tagRef(repo, t.name), t.version)
					if errors.Is(err, steaderr.ErrNotFound) || errors.Is(err, steaderr.ErrConflict) {
						continue // deleted or moved meanwhile
					}
					if err != nil {
						return done, err
					}
				}
				ri.manifests[t.key].tags--
				reason := "no retention rule keeps the tag"
				switch {
				case rule.KeepPulledWithin <= 0:
				case t.pulled.IsZero():
					reason += " (never pulled)"
				default:
					reason += " (last pulled " + t.pulled.Format(time.RFC3339) + ")"
				}
				record(Deletion{Repository: repo, Tag: t.name, Digest: t.key.String(), Pushed: t.pushed, Reason: reason})
			}
		}
		after := g.opts.DeleteUntaggedAfter
		if rule != nil && rule.DeleteUntaggedAfter > 0 {
			after = rule.DeleteUntaggedAfter
		}
		if after <= 0 {
			continue
		}
		kept, err := g.keptManifests(ctx, ri.manifests)
		if err != nil {
			return done, err
		}
		for _, k := range slices.SortedFunc(maps.Keys(ri.manifests), blob.Key.Compare) {
			m := ri.manifests[k]
			if m.version == 0 && !opts.DryRun {
				// Referrer entries with no link listed: left by an unlink
				// cut short, or a push's, whose link came after the listing.
				if _, err := g.st.Refs.Get(ctx, manifestRef(repo, k)); !errors.Is(err, steaderr.ErrNotFound) {
					if err != nil {
						return done, err
					}
					continue // linked: a push's
				}
				if err := g.dropEntries(ctx, m); err != nil {
					return done, err
				}
				continue
			}
			if kept[k] || m.link.Pushed.IsZero() || m.link.Pushed.After(now.Add(-after)) {
				continue
			}
			if !opts.DryRun {
				gone, err := g.unlinkUntagged(ctx, repo, k, m)
				if err != nil {
					return done, err
				}
				if !gone {
					continue // linked again meanwhile, or deleted
				}
			}
			record(Deletion{Repository: repo, Digest: k.String(), Pushed: m.link.Pushed, Reason: "untagged for longer than " + after.String()})
		}
	}
	return done, nil
}

// pulledWithin reports whether manifest d of repo was pulled since, as
// its link says now.
func (g *Registry) pulledWithin(ctx context.Context, repo string, d blob.Key, since time.Time) (bool, error) {
	rf, err := g.st.Refs.Get(ctx, manifestRef(repo, d))
	if errors.Is(err, steaderr.ErrNotFound) {
		return false, nil
	}
	return err == nil && !decodeLink(rf).Pulled.Before(since), err
}

// unlinkUntagged deletes the link of the untagged manifest d of repo if
// it is still the one Collect listed (m.version), then its referrer
// entries as listed, and reports whether it did. A push of d
// meanwhile sets the link again (a new version) before any tag, so a
// manifest tagged since it was listed stays, with its tags.
func (g *Registry) unlinkUntagged(ctx context.Context, repo string, d blob.Key, m *manifestInfo) (bool, error) {
	err := g.st.Refs.Delete(ctx, manifestRef(repo, d), m.version)
	if errors.Is(err, steaderr.ErrNotFound) || errors.Is(err, steaderr.ErrConflict) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	g.pulls.forget(manifestRef(repo, d))
	return true, g.dropEntries(ctx, m)
}

// dropEntries deletes m's referrer entries that are still as listed: one
// a push set again since is its own.
func (g *Registry) dropEntries(ctx context.Context, m *manifestInfo) error {
	for _, rf := range m.entries {
		err := g.st.Refs.Delete(ctx, rf.Name, rf.Version)
		if err != nil && !errors.Is(err, steaderr.ErrNotFound) && !errors.Is(err, steaderr.ErrConflict) {
			return err
		}
	}
	return nil
}

// pruned returns the tags rule does not keep: those matching neither its
// KeepTags nor its ImmutableTags, outside the KeepMostRecent last pushed,
// pushed before now - KeepPushedWithin, their manifest last pulled before
// now - KeepPulledWithin (or never). A tag without a push time (set
// before they were recorded) is kept.
func pruned(rule *RetentionRule, tags []tagInfo, now time.Time) []tagInfo {
	byPush := slices.Clone(tags)
	slices.SortStableFunc(byPush, func(a, b tagInfo) int { return b.pushed.Compare(a.pushed) })
	var out []tagInfo
	for i, t := range byPush {
		switch {
		case t.pushed.IsZero(),
			matchAny(rule.KeepTags, t.name),
			matchAny(rule.ImmutableTags, t.name),
			i < rule.KeepMostRecent,
			rule.KeepPushedWithin > 0 && t.pushed.After(now.Add(-rule.KeepPushedWithin)),
			rule.KeepPulledWithin > 0 && t.pulled.After(now.Add(-rule.KeepPulledWithin)):
			continue
		}
		out = append(out, t)
	}
	return out
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
		if m.tags > 0 {
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
