package registry

import (
	"context"
	"fmt"
	"strings"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// strayPage is how many refs nextRepository reads a query once it meets a
// ref under "oci/" that is no repository's.
const strayPage = 100

// nextRepository returns the first repository with a ref under
// "oci/"+prefix whose name sorts after after, "" when there is none. A
// ref there that is no repository's (no "/_", or a name the spec
// refuses) is passed over, strayPage of them a query; a repository's
// first ref costs one.
func (g *Registry) nextRepository(ctx context.Context, prefix, after string) (string, error) {
	for limit := 1; ; limit = strayPage {
		page, err := g.st.Refs.List(ctx, "oci/"+prefix, after, limit)
		if err != nil || len(page) == 0 {
			return "", err
		}
		for _, r := range page {
			if repo, _, ok := strings.Cut(strings.TrimPrefix(r.Name, "oci/"), "/_"); ok && checkName(repo) == nil {
				return repo, nil
			}
		}
		if len(page) < limit {
			return "", nil
		}
		after = page[len(page)-1].Name
	}
}

// Repositories lists up to n repositories whose names sort after after
// ("": from the first), in the catalog's order, one store query each,
// whatever the caller may pull: for an operator's console. Fewer than n
// means no repository follows.
func (g *Registry) Repositories(ctx context.Context, after string, n int) ([]string, error) {
	cursor := ""
	if after != "" {
		if e := checkName(after); e != nil {
			return nil, fmt.Errorf("%w: %s", steaderr.ErrInvalidName, e.msg)
		}
		cursor = repoPrefix(after) + lastRune
	}
	var repos []string
	for len(repos) < n {
		repo, err := g.nextRepository(ctx, "", cursor)
		if err != nil || repo == "" {
			return repos, err
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
