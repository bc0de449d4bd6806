package registry

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/steadkit/stead/steaderr"
)

// Retention is the registry's retention policy: which tags and untagged
// manifests Collect deletes, and which tags a push may not move. Each
// repository is governed by the first rule whose Repositories match it;
// one no rule matches, by Options.DeleteUntaggedAfter alone.
type Retention struct {
	Rules []RetentionRule `yaml:"rules"`
}

// RetentionRule is the policy of the repositories it matches. A rule
// with any of KeepTags, KeepMostRecent, KeepPushedWithin or
// KeepPulledWithin deletes every other tag: a tag stays when it matches
// KeepTags or ImmutableTags, is among the KeepMostRecent most recently
// pushed, was pushed within KeepPushedWithin, or its manifest was pulled
// within KeepPulledWithin. A rule with none of them deletes no tag.
type RetentionRule struct {
	// Repositories are path.Match patterns of repository names ("team/*").
	Repositories []string `yaml:"repositories"`
	// KeepTags are path.Match patterns of tags kept ("v*", "latest").
	KeepTags []string `yaml:"keep_tags"`
	// KeepMostRecent keeps the tags last pushed, this many.
	KeepMostRecent int `yaml:"keep_most_recent"`
	// KeepPushedWithin keeps the tags pushed within this period.
	KeepPushedWithin time.Duration `yaml:"keep_pushed_within"`
	// KeepPulledWithin keeps the tags whose manifest was pulled (a GET,
	// by tag or by digest, in this repository) within this period, the
	// last pull being recorded to stead.PullResolution/2. A manifest never
	// pulled is not kept by it.
	KeepPulledWithin time.Duration `yaml:"keep_pulled_within"`
	// DeleteUntaggedAfter, when set, replaces Options.DeleteUntaggedAfter
	// for these repositories.
	DeleteUntaggedAfter time.Duration `yaml:"delete_untagged_after"`
	// ImmutableTags are path.Match patterns of tags a push may not move to
	// another manifest, nor a DELETE remove (DENIED); retention keeps them.
	ImmutableTags []string `yaml:"immutable_tags"`
}

// ParseRetention reads a retention policy in YAML (docs/guides/registry.md),
// refusing unknown fields, bad patterns and negative values with an error
// wrapping steaderr.ErrInvalidArgument.
func ParseRetention(b []byte) (*Retention, error) {
	var r Retention
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&r); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: retention: %v", steaderr.ErrInvalidArgument, err)
	}
	for i, rule := range r.Rules {
		if len(rule.Repositories) == 0 {
			return nil, fmt.Errorf("%w: retention rule %d: no repositories", steaderr.ErrInvalidArgument, i+1)
		}
		for _, list := range [][]string{rule.Repositories, rule.KeepTags, rule.ImmutableTags} {
			for _, p := range list {
				if _, err := path.Match(p, ""); err != nil {
					return nil, fmt.Errorf("%w: retention rule %d: pattern %q: %v", steaderr.ErrInvalidArgument, i+1, p, err)
				}
			}
		}
		if rule.KeepMostRecent < 0 || rule.KeepPushedWithin < 0 || rule.KeepPulledWithin < 0 || rule.DeleteUntaggedAfter < 0 {
			return nil, fmt.Errorf("%w: retention rule %d: a negative count or period", steaderr.ErrInvalidArgument, i+1)
		}
	}
	return &r, nil
}

// rule returns the rule governing repo, nil when none does.
func (r *Retention) rule(repo string) *RetentionRule {
	if r == nil {
		return nil
	}
	for i := range r.Rules {
		if matchAny(r.Rules[i].Repositories, repo) {
			return &r.Rules[i]
		}
	}
	return nil
}

// immutable reports whether tag of repo may not be moved or deleted.
func (r *Retention) immutable(repo, tag string) bool {
	rule := r.rule(repo)
	return rule != nil && matchAny(rule.ImmutableTags, tag)
}

// prunesTags reports whether the rule deletes tags it does not keep.
func (rule *RetentionRule) prunesTags() bool {
	return rule != nil && (len(rule.KeepTags) > 0 || rule.KeepMostRecent > 0 || rule.KeepPushedWithin > 0 || rule.KeepPulledWithin > 0)
}

func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}
