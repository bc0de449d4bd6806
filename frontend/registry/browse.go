package registry

import (
	"context"
	"fmt"
	"strings"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// nextRepository reads the first ref under "oci/"+prefix whose name
// sorts after after, in one store query: name is "" when there is none,
// repo is "" when it is no repository's.
func (g *Registry) nextRepository(ctx context.Context, prefix, after string) (repo, name string, err error) {
	page, err := g.st.Refs.List(ctx, "oci/"+prefix, after, 1)
	if err != nil || len(page) == 0 {
		return "", "", err
	}
	repo, _, ok := strings.Cut(strings.TrimPrefix(page[0].Name, "oci/"), "/_")
	if !ok {
		return "", page[0].Name, nil
	}
	return repo, page[0].Name, nil
}

// Repositories lists up to n repositories whose names sort after after
// ("": from the first), in the catalog's order, one store query each,
// whatever the caller may pull: for an operator's console. A ref under
// "oci/" that is no repository's is skipped, at most n of them a call.
func (g *Registry) Repositories(ctx context.Context, after string, n int) ([]string, error) {
	cursor := ""
	if after != "" {
		if e := checkName(after); e != nil {
			return nil, fmt.Errorf("%w: %s", steaderr.ErrInvalidName, e.msg)
		}
		cursor = repoPrefix(after) + lastRune
	}
	var repos []string
	for skipped := 0; len(repos) < n && skipped <= n; {
		repo, name, err := g.nextRepository(ctx, "", cursor)
		switch {
		case err != nil:
			return nil, err
		case name == "":
			return repos, nil
		case repo == "":
			skipped++
			cursor = name
			continue
		}
		repos = append(repos, repo)
		cursor = repoPrefix(repo) + lastRune
	}
	return repos, nil
}

// RepositoryView is one repository as an operator's console shows it.
type RepositoryView struct {
	// RefPrefix begins the name of every ref the registry keeps for the
	// repository.
	RefPrefix string
	// Tags and Manifests are a page each in name order, each ref named
	// by its tag or its manifest's digest; More* report that more follow.
	Tags, Manifests         []ref.Ref
	MoreTags, MoreManifests bool
	// Usage is what the repository's refs hold (stead.Store.Usage).
	Usage stead.Usage
}

// Repository answers repository name: up to n of its tags after the tag
// tagsAfter and of its manifests after the digest manifestsAfter ("":
// from the first), and its usage. A name the spec refuses is an error
// wrapping steaderr.ErrInvalidName.
func (g *Registry) Repository(ctx context.Context, name, tagsAfter, manifestsAfter string, n int) (RepositoryView, error) {
	if e := checkName(name); e != nil {
		return RepositoryView{}, fmt.Errorf("%w: %s", steaderr.ErrInvalidName, e.msg)
	}
	v := RepositoryView{RefPrefix: repoPrefix(name)}
	page := func(prefix, after string) ([]ref.Ref, bool, error) {
		if after != "" {
			after = prefix + after
		}
		refs, err := g.st.Refs.List(ctx, prefix, after, n+1)
		if err != nil {
			return nil, false, err
		}
		more := len(refs) > n
		refs = refs[:min(len(refs), n)]
		for i := range refs {
			refs[i].Name = strings.TrimPrefix(refs[i].Name, prefix)
		}
		return refs, more, nil
	}
	var err error
	if v.Tags, v.MoreTags, err = page(tagPrefix(name), tagsAfter); err != nil {
		return RepositoryView{}, err
	}
	if v.Manifests, v.MoreManifests, err = page(manifestPrefix(name), manifestsAfter); err != nil {
		return RepositoryView{}, err
	}
	if v.Usage, err = g.st.Usage(ctx, v.RefPrefix); err != nil {
		return RepositoryView{}, err
	}
	return v, nil
}
