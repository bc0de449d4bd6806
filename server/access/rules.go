package access

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"
)

// The names a rule's who list gives a meaning of their own, besides user
// names and @groups.
const (
	anonymousName = "anonymous" // a request without credentials
	everyone      = "*"         // any identity that proved itself
)

// actionSet is a set of actions.
type actionSet map[string]bool

func (s actionSet) add(actions ...string) actionSet {
	if s == nil {
		s = actionSet{}
	}
	for _, a := range actions {
		s[a] = true
	}
	return s
}

func (s actionSet) has(a string) bool { return s[a] }

// rules is an access file, parsed.
type rules struct {
	groups map[string][]string
	rules  []rule
}

// rule grants the identities of who the actions it lists.
type rule struct {
	who          []string
	repositories []string
	registry     actionSet
	v1, cache    actionSet
	metrics      bool
}

// ruleFile is the access file, or the default rules.
type ruleFile struct {
	file *watched[rules]
}

// allowAll is a rule granting everything to who.
func allowAll(who ...string) rule {
	return rule{
		who: who, repositories: []string{"**"},
		registry: actionSet{}.add(Pull, Push, Delete),
		v1:       actionSet{}.add(Read, Write, GC), cache: actionSet{}.add(Read, Write), metrics: true,
	}
}

// openRules reads the access file at path, or makes the default rules:
// everything to every identity, and to anyone when there is none.
func openRules(path string, noIdentity bool, log *slog.Logger) (*ruleFile, error) {
	if path == "" {
		who := []string{everyone}
		if noIdentity {
			who = append(who, anonymousName)
		}
		f := &watched[rules]{}
		f.val.Store(&rules{rules: []rule{allowAll(who...)}})
		return &ruleFile{f}, nil
	}
	f, err := watch(path, "rules of the access file", parseRules, log)
	return &ruleFile{f}, err
}

func (f *ruleFile) current() *rules { return f.file.current() }

func (f *ruleFile) reload() error {
	if f.file.path == "" {
		return nil
	}
	return f.file.reload()
}

// fileRules is the access file's form (docs/guides/registry.md).
type fileRules struct {
	Groups map[string][]string `yaml:"groups"`
	Rules  []struct {
		Who          []string `yaml:"who"`
		Repositories []string `yaml:"repositories"`
		Registry     []string `yaml:"registry"`
		V1           []string `yaml:"v1"`
		Cache        []string `yaml:"cache"`
		Metrics      bool     `yaml:"metrics"`
	} `yaml:"rules"`
}

// parseRules parses an access file (YAML, of which JSON is a subset),
// refusing unknown fields, actions and groups, and malformed patterns.
func parseRules(b []byte) (*rules, error) {
	var f fileRules
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	out := &rules{groups: f.Groups}
	for g, members := range f.Groups {
		if g == "" || strings.HasPrefix(g, "@") {
			return nil, fmt.Errorf("group %q: name it without the @", g)
		}
		for _, m := range members {
			if err := checkUserName(m); err != nil && m != TokenIdentity {
				return nil, fmt.Errorf("group %q: %v", g, err)
			}
		}
	}
	for i, fr := range f.Rules {
		r := rule{who: fr.Who, repositories: fr.Repositories, metrics: fr.Metrics}
		where := fmt.Sprintf("rule %d", i+1)
		if len(fr.Who) == 0 {
			return nil, fmt.Errorf("%s: who lists no one", where)
		}
		for _, w := range fr.Who {
			if g, ok := strings.CutPrefix(w, "@"); ok {
				if _, known := f.Groups[g]; !known {
					return nil, fmt.Errorf("%s: no group %q", where, g)
				}
			} else if w == "" {
				return nil, fmt.Errorf("%s: an empty name in who", where)
			}
		}
		if (len(fr.Repositories) == 0) != (len(fr.Registry) == 0) {
			return nil, fmt.Errorf("%s: repositories and registry go together: the patterns, and the actions (pull, push, delete) on them", where)
		}
		for _, p := range fr.Repositories {
			if _, err := path.Match(strings.TrimSuffix(p, "/**"), ""); err != nil || strings.Contains(strings.TrimSuffix(p, "**"), "**") {
				return nil, fmt.Errorf("%s: repository pattern %q is malformed: want a path.Match glob, optionally ending in /** or just **", where, p)
			}
		}
		var err error
		if r.registry, err = actions(where+": registry", fr.Registry, Pull, Push, Delete); err != nil {
			return nil, err
		}
		if r.v1, err = actions(where+": v1", fr.V1, Read, Write, GC); err != nil {
			return nil, err
		}
		if r.cache, err = actions(where+": cache", fr.Cache, Read, Write); err != nil {
			return nil, err
		}
		out.rules = append(out.rules, r)
	}
	return out, nil
}

func actions(where string, got []string, known ...string) (actionSet, error) {
	s := actionSet{}
	for _, a := range got {
		if !slices.Contains(known, a) {
			return nil, fmt.Errorf("%s: unknown action %q: want %s", where, a, strings.Join(known, ", "))
		}
		s[a] = true
	}
	return s, nil
}

// matchRepo reports whether the repository name matches pattern: a
// path.Match glob (whose * stops at a slash); "p/**" also matches p and
// every name under it, "**" every name.
func matchRepo(pattern, name string) bool {
	if pattern == "**" {
		return true
	}
	if prefix, ok := strings.CutSuffix(pattern, "/**"); ok {
		parts := strings.Split(name, "/")
		for i := 1; i <= len(parts); i++ {
			if ok, _ := path.Match(prefix, strings.Join(parts[:i], "/")); ok {
				return true
			}
		}
		return false
	}
	ok, _ := path.Match(pattern, name)
	return ok
}

// applies reports whether the rule's who list names c.
func (rs *rules) applies(r rule, c *Caller) bool {
	for _, w := range r.who {
		switch g, isGroup := strings.CutPrefix(w, "@"); {
		case w == anonymousName:
			if c.kind == anonymous {
				return true
			}
		case c.kind == anonymous:
		case w == everyone:
			return true
		case isGroup:
			if slices.Contains(rs.groups[g], c.name) {
				return true
			}
		case w == c.name:
			return true
		}
	}
	return false
}

// grants reports whether the rules naming c grant action on typ/name;
// the registry's catalog ("*") is every identified caller's, and every
// caller's when the authority is open.
func (rs *rules) grants(c *Caller, typ, name, action string) bool {
	if typ == Registry && name == "catalog" && action == "*" && (c.kind != anonymous || c.a.Open()) {
		return true
	}
	for _, r := range rs.rules {
		if !rs.applies(r, c) {
			continue
		}
		switch typ {
		case Repository:
			if !r.registry.has(action) {
				continue
			}
			for _, p := range r.repositories {
				if matchRepo(p, name) {
					return true
				}
			}
		case Area:
			switch name {
			case "v1":
				if r.v1.has(action) {
					return true
				}
			case "cache":
				if r.cache.has(action) {
					return true
				}
			case "metrics":
				if r.metrics && action == Read {
					return true
				}
			}
		}
	}
	return false
}

// prefixes returns the beginnings of the names of typ (Repository) that
// the rules naming c may grant action on: every such name starts with one
// of them. They are sorted, none the beginning of another; [""] is every
// name.
func (rs *rules) prefixes(c *Caller, typ, action string) []string {
	var all []string
	for _, r := range rs.rules {
		if typ != Repository || !r.registry.has(action) || !rs.applies(r, c) {
			continue
		}
		for _, p := range r.repositories {
			p = strings.TrimSuffix(p, "/**")
			if p == "**" {
				p = ""
			}
			if i := strings.IndexAny(p, `*?[\`); i >= 0 {
				p = p[:i]
			}
			all = append(all, p)
		}
	}
	slices.Sort(all)
	var out []string
	for _, p := range all {
		if len(out) == 0 || !strings.HasPrefix(p, out[len(out)-1]) {
			out = append(out, p)
		}
	}
	return out
}
