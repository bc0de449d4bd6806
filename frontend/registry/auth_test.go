package registry_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/frontend/registry"
	"github.com/steadkit/stead/internal/testing/fronttest"
	"github.com/steadkit/stead/server"
	"github.com/steadkit/stead/server/access"
)

// The users of the access tests: alice may push team/**, bob pull it and
// push bob/**, carol push carol/**, anyone pull public/**, the token
// everything.
const authRules = `
rules:
  - who: [alice]
    repositories: ["team/**"]
    registry: [pull, push, delete]
  - who: [bob]
    repositories: ["team/**"]
    registry: [pull]
  - who: [bob]
    repositories: ["bob/**"]
    registry: [pull, push]
  - who: [carol]
    repositories: ["carol/**"]
    registry: [pull, push]
  - who: [anonymous]
    repositories: ["public/**"]
    registry: [pull]
  - who: [token]
    repositories: ["**"]
    registry: [pull, push, delete]
`

var authUsers = map[string]string{"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}

// authority writes an htpasswd file of authUsers and an access file of
// rules, and returns their Authority.
func authority(t *testing.T, rules string) *access.Authority {
	t.Helper()
	dir := t.TempDir()
	var lines strings.Builder
	for u, p := range authUsers {
		h, err := bcrypt.GenerateFromPassword([]byte(p), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		lines.WriteString(u + ":" + string(h) + "\n")
	}
	for name, body := range map[string]string{"htpasswd": lines.String(), "access.yaml": rules} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a, err := access.New(access.Config{Token: "tok", Htpasswd: filepath.Join(dir, "htpasswd"), Access: filepath.Join(dir, "access.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// authClient is a client of a registry with users; its requests carry
// auth (an Authorization header) when not empty.
func authClient(t *testing.T, url string) *client {
	t.Helper()
	st, err := stead.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(st, registry.Options{MaxBlobSize: 1 << 20})
	addr := fronttest.Serve(t, st, server.Options{Access: authority(t, authRules), Mounts: []server.Mount{{Prefix: registry.Prefix, Handler: reg}}})
	t.Cleanup(func() {
		st.Close()
	})
	return &client{t: t, base: "http://" + addr, st: st}
}

func basicAuth(user string) map[string]string {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, authUsers[user])
	return map[string]string{"Authorization": r.Header.Get("Authorization")}
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

// loginToken asks the token endpoint for scope as user.
func (c *client) loginToken(user string, scopes ...string) string {
	c.t.Helper()
	resp, body := c.do("GET", "/v2/token?"+url.Values{"service": {"stead"}, "scope": scopes}.Encode(), basicAuth(user), nil)
	var ans struct{ Token, AccessToken string }
	if err := json.Unmarshal(body, &ans); resp.StatusCode != 200 || err != nil || ans.Token == "" {
		c.t.Fatalf("token for %s %v = %d %s", user, scopes, resp.StatusCode, body)
	}
	return ans.Token
}

// pushAs pushes b whole into repo with hdr, returning the answer.
func (c *client) pushAs(repo string, b []byte, hdr map[string]string) (*http.Response, []byte, string) {
	c.t.Helper()
	sum := sha256.Sum256(b)
	d := "sha256:" + hex.EncodeToString(sum[:])
	resp, body := c.do("POST", "/v2/"+repo+"/blobs/uploads/?digest="+d, hdr, b)
	return resp, body, d
}

// TestChallenge: a request without credentials is answered 401 with a
// challenge naming the token endpoint, the service and the scope to ask.
func TestChallenge(t *testing.T) {
	t.Parallel()
	c := authClient(t, "mem://")
	host := strings.TrimPrefix(c.base, "http://")
	for path, scope := range map[string]string{
		"GET /v2/":                         "",
		"GET /v2/team/app/manifests/v1":    `,scope="repository:team/app:pull"`,
		"POST /v2/team/app/blobs/uploads/": `,scope="repository:team/app:pull,push"`,
		"DELETE /v2/team/app/manifests/sha256:" + strings.Repeat("0", 64): `,scope="repository:team/app:delete"`,
		"GET /v2/_catalog": `,scope="registry:catalog:*"`,
	} {
		method, p, _ := strings.Cut(path, " ")
		resp, body := c.do(method, p, nil, nil)
		wantError(t, path, resp, body, 401, "UNAUTHORIZED")
		want := `Bearer realm="http://` + host + `/v2/token",service="stead"` + scope
		if got := resp.Header.Get("WWW-Authenticate"); got != want {
			t.Errorf("%s: challenge %q; want %q", path, got, want)
		}
	}
	// Anonymous pull of what anonymous may pull needs nothing.
	resp, body := c.do("GET", "/v2/public/x/tags/list", nil, nil)
	wantError(t, "anonymous tags of public/x", resp, body, 404, "NAME_UNKNOWN")
	// Wrong credentials are refused, even where anonymous may pull.
	resp, body = c.do("GET", "/v2/public/x/tags/list", map[string]string{"Authorization": "Basic " + "bWFsbG9yeTp4"}, nil)
	wantError(t, "wrong credentials", resp, body, 401, "UNAUTHORIZED")
}

// TestTokenFlow: a user's token and Basic credentials push within its
// rules; outside them, 403 DENIED; a token for one repository is refused
// on another; a token asked for more than the rules allow grants only
// what they allow.
func TestTokenFlow(t *testing.T) {
	t.Parallel()
	c := authClient(t, "mem://")
	if resp, _ := c.do("GET", "/v2/", basicAuth("bob"), nil); resp.StatusCode != 200 {
		t.Fatalf("GET /v2/ as bob = %d", resp.StatusCode)
	}
	tok := c.loginToken("alice", "repository:team/app:pull,push")
	if resp, body, _ := c.pushAs("team/app", []byte("layer"), bearer(tok)); resp.StatusCode != 201 {
		t.Fatalf("alice's push with a token = %d %s", resp.StatusCode, body)
	}
	if resp, body, _ := c.pushAs("team/lib", []byte("layer"), bearer(tok)); resp.StatusCode != 403 {
		t.Fatalf("alice's token for team/app on team/lib = %d %s; want 403", resp.StatusCode, body)
	}
	if resp, body, _ := c.pushAs("team/lib", []byte("layer"), basicAuth("alice")); resp.StatusCode != 201 {
		t.Fatalf("alice's push with Basic = %d %s", resp.StatusCode, body)
	}
	// bob may pull team/**: asked for push too, his token has pull only.
	tok = c.loginToken("bob", "repository:team/app:pull,push,delete")
	resp, body, d := c.pushAs("team/app", []byte("bob's layer"), bearer(tok))
	wantError(t, "bob's push to team/app", resp, body, 403, "DENIED")
	resp, body = c.do("GET", "/v2/team/app/blobs/"+d, bearer(tok), nil)
	wantError(t, "bob's refused blob", resp, body, 404, "BLOB_UNKNOWN")
	resp, body, _ = c.pushAs("team/app", []byte("bob's layer"), basicAuth("bob"))
	wantError(t, "bob's push to team/app with Basic", resp, body, 403, "DENIED")
	// The OAuth2 form.
	form := url.Values{"grant_type": {"password"}, "username": {"bob"}, "password": {"bob-pw"}, "service": {"stead"}, "scope": {"repository:bob/x:pull,push"}}
	resp, body = c.do("POST", "/v2/token", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, []byte(form.Encode()))
	var ans struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(body, &ans); resp.StatusCode != 200 || err != nil {
		t.Fatalf("POST /v2/token = %d %s", resp.StatusCode, body)
	}
	if resp, body, _ := c.pushAs("bob/x", []byte("bob's layer"), bearer(ans.AccessToken)); resp.StatusCode != 201 {
		t.Fatalf("bob's push to bob/x = %d %s", resp.StatusCode, body)
	}
	form.Set("password", "wrong")
	resp, body = c.do("POST", "/v2/token", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, []byte(form.Encode()))
	wantError(t, "POST /v2/token with a wrong password", resp, body, 401, "UNAUTHORIZED")
	// The static token works as before.
	if resp, body, _ := c.pushAs("anything/at-all", []byte("x"), bearer("tok")); resp.StatusCode != 201 {
		t.Fatalf("the static token's push = %d %s", resp.StatusCode, body)
	}
}

// TestMountNeedsPull: a mount from a repository the caller may not pull,
// or from none named, does not mount (202, an upload begins), so that it
// tells nothing of the blob; from one it may pull, it mounts (201).
func TestMountNeedsPull(t *testing.T) {
	t.Parallel()
	c := authClient(t, "mem://")
	secret := []byte("team secret layer")
	_, _, d := c.pushAs("team/secret", secret, basicAuth("alice"))
	for _, from := range []string{"team/secret", ""} {
		resp, body := c.do("POST", "/v2/carol/x/blobs/uploads/?"+url.Values{"mount": {d}, "from": {from}}.Encode(), basicAuth("carol"), nil)
		if resp.StatusCode != 202 || resp.Header.Get("Docker-Content-Digest") != "" {
			t.Fatalf("carol's mount from %q = %d %s %v; want 202 and an upload", from, resp.StatusCode, body, resp.Header)
		}
	}
	resp, body := c.do("GET", "/v2/carol/x/blobs/"+d, basicAuth("carol"), nil)
	wantError(t, "carol's blob after the refused mount", resp, body, 404, "BLOB_UNKNOWN")
	// bob may pull team/**: his mount works.
	resp, body = c.do("POST", "/v2/bob/x/blobs/uploads/?"+url.Values{"mount": {d}, "from": {"team/secret"}}.Encode(), basicAuth("bob"), nil)
	if resp.StatusCode != 201 {
		t.Fatalf("bob's mount = %d %s; want 201", resp.StatusCode, body)
	}
	if resp, got := c.do("GET", "/v2/bob/x/blobs/"+d, basicAuth("bob"), nil); resp.StatusCode != 200 || !bytes.Equal(got, secret) {
		t.Fatalf("bob's mounted blob = %d %q", resp.StatusCode, got)
	}
}

// TestCatalog: _catalog lists the repositories the caller may pull, n at
// a time with a Link to the next page.
func TestCatalog(t *testing.T) {
	t.Parallel()
	c := authClient(t, "mem://")
	for _, repo := range []string{"team/a", "team/a/b", "team/a-b", "bob/x", "carol/x", "public/p"} {
		if resp, body, _ := c.pushAs(repo, []byte(repo), bearer("tok")); resp.StatusCode != 201 {
			t.Fatalf("push %s = %d %s", repo, resp.StatusCode, body)
		}
	}
	list := func(user, query string) ([]string, string) {
		t.Helper()
		hdr := bearer("tok")
		switch {
		case user == "carol":
			// A token with the catalog's scope lists what the rules let
			// carol pull, though it names none of it.
			hdr = bearer(c.loginToken(user, "registry:catalog:*"))
		case user != "token":
			hdr = basicAuth(user)
		}
		resp, body := c.do("GET", "/v2/_catalog"+query, hdr, nil)
		var cat struct{ Repositories []string }
		if err := json.Unmarshal(body, &cat); resp.StatusCode != 200 || err != nil {
			t.Fatalf("catalog as %s = %d %s", user, resp.StatusCode, body)
		}
		return cat.Repositories, resp.Header.Get("Link")
	}
	for user, want := range map[string]string{
		"alice": "team/a-b team/a team/a/b",
		"bob":   "bob/x team/a-b team/a team/a/b",
		"carol": "carol/x",
		"token": "bob/x carol/x public/p team/a-b team/a team/a/b",
	} {
		if got, link := list(user, ""); strings.Join(got, " ") != want || link != "" {
			t.Errorf("catalog as %s = %v, Link %q; want %s", user, got, link, want)
		}
	}
	var pages []string
	query := "?n=2"
	for range 5 {
		got, link := list("bob", query)
		pages = append(pages, strings.Join(got, " "))
		if link == "" {
			break
		}
		u, _, _ := strings.Cut(strings.TrimPrefix(link, "</v2/_catalog"), ">")
		query = u
	}
	if got := strings.Join(pages, " | "); got != "bob/x team/a-b | team/a team/a/b" {
		t.Fatalf("bob's pages = %q", got)
	}
}

// TestLoginLimit: an address's failed logins at the token endpoint count
// once each: ten are answered 401, the eleventh login, right or wrong,
// 429 TOOMANYREQUESTS.
func TestLoginLimit(t *testing.T) {
	t.Parallel()
	c := authClient(t, "mem://")
	wrong := map[string]string{"Authorization": "Basic " + "YWxpY2U6d3Jvbmc="} // alice:wrong
	for i := range access.DefaultFailBurst {
		resp, body := c.do("GET", "/v2/token?service=stead&scope=repository:team/app:pull", wrong, nil)
		wantError(t, "wrong password "+strconv.Itoa(i+1), resp, body, 401, "UNAUTHORIZED")
	}
	resp, body := c.do("GET", "/v2/token?service=stead", basicAuth("alice"), nil)
	wantError(t, "the right password after ten wrong", resp, body, 429, "TOOMANYREQUESTS")
	// The wait is the refill's, one login per 6 s, less the time the ten
	// took.
	if n, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || n < 2 || n > 6 {
		t.Fatalf("Retry-After %q; want the refill's, up to 6", resp.Header.Get("Retry-After"))
	}
	// Another user from the address logs in.
	resp, body = c.do("GET", "/v2/token?service=stead", basicAuth("bob"), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("bob after alice's ten failures = %d %s", resp.StatusCode, body)
	}
}
