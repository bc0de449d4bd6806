package registry

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/steadkit/stead/server/access"
)

// need is the action a request on a repository route asks of its caller:
// pull to read, delete to delete, push for the rest (uploads and
// manifest puts).
func need(kind, method string) string {
	switch {
	case method == http.MethodDelete && (kind == "blob" || kind == "manifest"):
		return access.Delete
	case kind == "blob", kind == "manifest", kind == "tags", kind == "referrers":
		if method == http.MethodGet || method == http.MethodHead {
			return access.Pull
		}
	}
	return access.Push
}

// authorize checks the caller the server put in r's context (package
// access) against the route, answering the refusal when it may not: 401
// UNAUTHORIZED with a challenge naming the token endpoint and the scope
// to ask for, 403 DENIED for a known caller outside its rules, 429 for an
// address that failed to log in too often.
func (g *Registry) authorize(w http.ResponseWriter, r *http.Request, rt route) bool {
	var err error
	var action string
	switch rt.kind {
	case "base":
		err = access.Identified(r.Context())
	case "catalog":
		err = access.Check(r.Context(), access.Registry, "catalog", "*")
	default:
		action = need(rt.kind, r.Method)
		err = access.Check(r.Context(), access.Repository, rt.name, action)
	}
	if err == nil {
		return true
	}
	refuse(w, r, err, challengeScope(rt, action))
	return false
}

// challengeScope is the scope a refusal of action on rt tells the client
// to ask a token for.
func challengeScope(rt route, action string) string {
	switch {
	case rt.kind == "base":
		return ""
	case rt.kind == "catalog":
		return "registry:catalog:*"
	case action == access.Push:
		return "repository:" + rt.name + ":pull,push"
	}
	return "repository:" + rt.name + ":" + action
}

// refuse answers an authorization error in the spec's form.
func refuse(w http.ResponseWriter, r *http.Request, err error, scope string) {
	switch {
	case errors.Is(err, access.ErrDenied):
		writeError(w, errorf(codeDenied, "requested access to the resource is denied"))
	case errors.Is(err, access.ErrTooManyAttempts):
		w.Header().Set("Retry-After", access.RetryAfter(err))
		writeError(w, errorf(codeTooManyRequests, "%v", err))
	case access.IsBadRequest(err):
		writeError(w, errorf(codeUnsupported, "%v", err).withStatus(http.StatusBadRequest))
	case access.IsMethod(err):
		writeError(w, errorf(codeUnsupported, "%v", err))
	case errors.Is(err, access.ErrUnauthenticated):
		if a := access.AuthorityOf(r.Context()); a != nil {
			w.Header().Set("WWW-Authenticate", a.Challenge(r, scope))
		}
		writeError(w, errorf(codeUnauthorized, "authentication required: log in with a user name and password"))
	default:
		writeError(w, errorf(codeUnknown, "internal error"))
	}
}

// serveToken serves the token endpoint at /v2/token (access.ServeToken).
func (g *Registry) serveToken(w http.ResponseWriter, r *http.Request) {
	a := access.AuthorityOf(r.Context())
	if a == nil {
		writeError(w, &regError{code: codeNameUnknown, msg: "no such endpoint: this registry takes no logins", status: http.StatusNotFound})
		return
	}
	a.ServeToken(w, r, func(w http.ResponseWriter, r *http.Request, err error) {
		if !errors.Is(err, access.ErrUnauthenticated) && !errors.Is(err, access.ErrTooManyAttempts) && !access.IsBadRequest(err) && !access.IsMethod(err) {
			g.log.Error("registry: token", "err", err)
		}
		refuse(w, r, err, "")
	})
}

// maxCatalog bounds one page of the catalog; defaultCatalog is its
// length when the request names none.
const (
	maxCatalog     = 1000
	defaultCatalog = 100
)

// lastRune sorts after every byte a ref name of a repository has after
// its "/_".
const lastRune = "\U0010FFFF"

// listCatalog answers GET /v2/_catalog: the repositories the caller may
// pull, at most n after last, and a Link to the next page. Repositories
// are in the order of their names followed by "/", which is how the
// store sorts them ("a-b" before "a", "a" before "a/b"); last continues
// from the one named, whatever the order.
func (g *Registry) listCatalog(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	n := defaultCatalog
	if s := q.Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return errorf(codeUnsupported, "n %.40q: want a count from 0", s).withStatus(http.StatusBadRequest)
		}
		n = min(v, maxCatalog)
	}
	after := ""
	if last := q.Get("last"); last != "" {
		if e := checkName(last); e != nil {
			return e
		}
		after = repoPrefix(last) + lastRune
	}
	repos := []string{}
	more := false
	// Only the names the caller's rules may let it pull are read: one
	// store query a repository under them, not one for every repository.
	for _, prefix := range access.ListPrefixes(r.Context(), access.Repository, access.Pull) {
		for n > 0 && !more {
			repo, err := g.nextRepository(r.Context(), prefix, after)
			if err != nil {
				return err
			}
			if repo == "" {
				break // no repository under prefix sorts after it
			}
			after = repoPrefix(repo) + lastRune
			if !access.Listed(r.Context(), access.Repository, repo, access.Pull) {
				continue
			}
			if len(repos) == n {
				more = true
				break
			}
			repos = append(repos, repo)
		}
	}
	if more {
		next := url.Values{"n": {strconv.Itoa(n)}, "last": {repos[len(repos)-1]}}
		w.Header().Set("Link", fmt.Sprintf(`</v2/_catalog?%s>; rel="next"`, next.Encode()))
	}
	writeJSON(w, http.StatusOK, "application/json", struct {
		Repositories []string `json:"repositories"`
	}{repos})
	return nil
}
