package access

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/crypto/bcrypt"

	"github.com/steadkit/stead/internal/clock"
)

// htpasswdLines returns lines of user:password pairs, hashed at bcrypt's
// lowest cost to keep tests quick.
func htpasswdLines(t *testing.T, pairs ...string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < len(pairs); i += 2 {
		h, err := bcrypt.GenerateFromPassword([]byte(pairs[i+1]), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString(pairs[i] + ":" + string(h) + "\n")
	}
	return b.String()
}

const testRules = `
groups:
  devs: [alice]
rules:
  - who: ["@devs"]
    repositories: ["team/**"]
    registry: [pull, push]
  - who: [bob]
    repositories: ["team/app"]
    registry: [pull]
    cache: [read, write]
  - who: [anonymous]
    repositories: ["public/*"]
    registry: [pull]
  - who: [token]
    repositories: ["**"]
    registry: [pull, push, delete]
    v1: [read, write, gc]
    metrics: true
`

type fixture struct {
	a        *Authority
	clk      *clock.Fake
	htpasswd string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{clk: clock.NewFake(clock.FakeStart), htpasswd: filepath.Join(dir, "htpasswd")}
	write(t, f.htpasswd, htpasswdLines(t, "alice", "wonder", "bob", "builder"))
	rules := filepath.Join(dir, "access.yaml")
	write(t, rules, testRules)
	a, err := New(Config{Token: "s3cret-token", Htpasswd: f.htpasswd, Access: rules, Now: f.clk.Now, FailBurst: 3, FailEvery: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	f.a = a
	return f
}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}

func request(auth string) *http.Request {
	r := httptest.NewRequest("GET", "http://reg.example/v2/", nil)
	r.RemoteAddr = "192.0.2.7:4242"
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	return r
}

func basic(user, pass string) string {
	r := httptest.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, pass)
	return r.Header.Get("Authorization")
}

// check is Check on the caller Authenticate makes of auth.
func (f *fixture) check(auth, typ, name, action string) error {
	c, err := f.a.Authenticate(request(auth))
	return Check(f.a.NewContext(context.Background(), c, err), typ, name, action)
}

// token asks the token endpoint for scopes with auth, returning the
// token.
func (f *fixture) token(t *testing.T, auth string, scopes ...string) (string, tokenAnswer) {
	t.Helper()
	q := url.Values{"service": {"stead"}, "scope": scopes}
	r := httptest.NewRequest("GET", "http://reg.example/v2/token?"+q.Encode(), nil)
	r.RemoteAddr = "192.0.2.7:4242"
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	f.a.ServeToken(w, r, func(w http.ResponseWriter, _ *http.Request, err error) {
		http.Error(w, err.Error(), http.StatusUnauthorized)
	})
	if w.Code != 200 {
		t.Fatalf("token %v = %d %s", scopes, w.Code, w.Body)
	}
	var ans tokenAnswer
	if err := json.Unmarshal(w.Body.Bytes(), &ans); err != nil || ans.Token == "" || ans.Token != ans.AccessToken || ans.ExpiresIn != 300 || ans.IssuedAt == "" {
		t.Fatalf("token answer %s: %v", w.Body, err)
	}
	return ans.Token, ans
}

// TestWrongPassword: an unknown user and a wrong password are refused
// alike, with one error; the unknown user is compared against a hash of
// the file's own cost, so that it takes as long as a known one.
func TestWrongPassword(t *testing.T) {
	f := newFixture(t)
	_, errUser := f.a.Authenticate(request(basic("mallory", "wonder")))
	_, errPass := f.a.Authenticate(request(basic("alice", "wrong")))
	if !errors.Is(errUser, ErrUnauthenticated) || errUser != errPass {
		t.Fatalf("unknown user: %v; wrong password: %v; want the same ErrUnauthenticated", errUser, errPass)
	}
	if c, err := f.a.Authenticate(request(basic("alice", "wonder"))); err != nil || c.Name() != "alice" {
		t.Fatalf("alice = %v, %v", c, err)
	}
	h := f.a.users.file.current()
	if got, _ := bcrypt.Cost(h.dummy); got != bcrypt.MinCost {
		t.Fatalf("dummy hash cost %d; want the file's, %d", got, bcrypt.MinCost)
	}
	// A line that is not bcrypt is refused, naming the line.
	bad := filepath.Join(t.TempDir(), "htpasswd")
	write(t, bad, "carol:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n")
	if _, err := New(Config{Htpasswd: bad}); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("SHA htpasswd = %v; want a refusal of line 1", err)
	}
}

// TestStaticToken: the token is an identity as a bearer and as Basic
// "token" with the token for password; without an access file it may do
// everything, as before.
func TestStaticToken(t *testing.T) {
	a, err := New(Config{Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{a: a}
	for _, auth := range []string{"Bearer tok", "bearer tok", basic("token", "tok")} {
		for _, c := range [][3]string{{Repository, "any/repo", Delete}, {Area, "v1", GC}, {Area, "cache", Write}, {Area, "metrics", Read}} {
			if err := f.check(auth, c[0], c[1], c[2]); err != nil {
				t.Errorf("%q on %v: %v", auth, c, err)
			}
		}
	}
	for _, auth := range []string{"", "Bearer tok2", "Bearer", basic("token", "tok2"), "Digest tok"} {
		if err := f.check(auth, Area, "v1", Read); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%q: %v; want ErrUnauthenticated", auth, err)
		}
	}
	// No identity at all: anyone may do anything.
	open, _ := New(Config{})
	if err := (&fixture{a: open}).check("", Repository, "x", Delete); err != nil || !open.Open() {
		t.Fatalf("open authority: %v", err)
	}
}

// TestRules: the access file's grants, by user, group, anonymous and
// token; an authenticated caller outside them is denied, an anonymous one
// asked to authenticate.
func TestRules(t *testing.T) {
	f := newFixture(t)
	alice, bob := basic("alice", "wonder"), basic("bob", "builder")
	for _, c := range []struct {
		auth, typ, name, action string
		want                    error
	}{
		{alice, Repository, "team/app", Push, nil},
		{alice, Repository, "team/a/b", Pull, nil},
		{alice, Repository, "team", Pull, nil},
		{alice, Repository, "teams/x", Pull, ErrDenied},
		{alice, Repository, "team/app", Delete, ErrDenied},
		{alice, Area, "cache", Read, ErrDenied},
		{bob, Repository, "team/app", Pull, nil},
		{bob, Repository, "team/app", Push, ErrDenied},
		{bob, Repository, "team/app/x", Pull, ErrDenied},
		{bob, Area, "cache", Write, nil},
		{bob, Area, "v1", Read, ErrDenied},
		{"", Repository, "public/x", Pull, nil},
		{"", Repository, "public/x/y", Pull, ErrUnauthenticated},
		{"", Repository, "team/app", Pull, ErrUnauthenticated},
		{"Bearer s3cret-token", Area, "v1", GC, nil},
		{"Bearer s3cret-token", Area, "cache", Read, ErrDenied},
	} {
		if err := f.check(c.auth, c.typ, c.name, c.action); !errors.Is(err, c.want) || (c.want == nil && err != nil) {
			t.Errorf("%s %s:%s:%s = %v; want %v", c.auth, c.typ, c.name, c.action, err, c.want)
		}
	}
	for _, bad := range []string{
		"rules: [{who: [x], repositories: [a], registry: [pul]}]",
		"rules: [{who: ['@nobody'], cache: [read]}]",
		"rules: [{who: [x], repositories: ['a[']}]",
		"rules: [{who: [x], repositories: [a]}]",
		"rules: [{who: [x], cash: [read]}]",
		"rules: [{who: [], cache: [read]}]",
		"rules: [{who: [x], repositories: ['a/**/b'], registry: [pull]}]",
	} {
		if _, err := parseRules([]byte(bad)); err == nil {
			t.Errorf("access file %q parsed; want an error", bad)
		}
	}
}

// TestTokenScopes: a token grants what was asked and allowed, never more;
// it holds for its repository only, and the rules in force still apply.
func TestTokenScopes(t *testing.T) {
	f := newFixture(t)
	bob := basic("bob", "builder")
	tok, ans := f.token(t, bob, "repository:team/app:pull,push,delete", "repository:team/other:pull")
	if ans.Scope != "repository:team/app:pull" {
		t.Fatalf("granted %q; want repository:team/app:pull only (no escalation)", ans.Scope)
	}
	for _, c := range []struct {
		name, action string
		want         error
	}{
		{"team/app", Pull, nil},
		{"team/app", Push, ErrDenied},
		{"team/other", Pull, ErrDenied},
		{"public/x", Pull, ErrDenied}, // anonymous may, but this token was not asked for it
	} {
		if err := f.check("Bearer "+tok, Repository, c.name, c.action); !errors.Is(err, c.want) || (c.want == nil && err != nil) {
			t.Errorf("bob's token on %s %s = %v; want %v", c.name, c.action, err, c.want)
		}
	}
	// A token for team/app is no good for another repository, even one
	// the user may pull: alice's token for team/a is refused on team/b.
	tokA, _ := f.token(t, basic("alice", "wonder"), "repository:team/a:pull,push")
	if err := f.check("Bearer "+tokA, Repository, "team/b", Pull); !errors.Is(err, ErrDenied) {
		t.Fatalf("token for team/a on team/b = %v; want ErrDenied", err)
	}
	// docker login's GET with offline_token=true: a refresh token too,
	// which the OAuth2 form takes.
	q := url.Values{"service": {"stead"}, "offline_token": {"true"}, "client_id": {"docker"}}
	r := httptest.NewRequest("GET", "http://reg.example/v2/token?"+q.Encode(), nil)
	r.Header.Set("Authorization", bob)
	w := httptest.NewRecorder()
	f.a.ServeToken(w, r, func(w http.ResponseWriter, _ *http.Request, err error) {
		http.Error(w, err.Error(), http.StatusUnauthorized)
	})
	var offline tokenAnswer
	if err := json.Unmarshal(w.Body.Bytes(), &offline); err != nil || offline.RefreshToken == "" {
		t.Fatalf("offline_token=true = %d %s; want a refresh token", w.Code, w.Body)
	}
	if a := f.post(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {offline.RefreshToken}, "scope": {"repository:team/app:push"}}, 200); a.Scope != "" {
		t.Fatalf("refresh for push granted %q; want nothing", a.Scope)
	}
	// Anonymous: a token for what anonymous may pull, and nothing else.
	anon, ans := f.token(t, "", "repository:public/x:pull,push", "repository:team/app:pull")
	if ans.Scope != "repository:public/x:pull" {
		t.Fatalf("anonymous granted %q", ans.Scope)
	}
	if err := f.check("Bearer "+anon, Repository, "team/app", Pull); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("anonymous token on team/app = %v; want ErrUnauthenticated (so that the client logs in)", err)
	}
}

// TestTokenTampered: a token altered, signed with another key, with
// alg none, for another audience, expired, or not yet valid is refused.
func TestTokenTampered(t *testing.T) {
	f := newFixture(t)
	tok, _ := f.token(t, basic("alice", "wonder"), "repository:team/a:pull")
	ok := func(tok string) error { return f.check("Bearer "+tok, Repository, "team/a", Pull) }
	if err := ok(tok); err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(tok, ".")
	flip := func(s string) string {
		b := []byte(s)
		if b[5] == 'A' {
			b[5] = 'B'
		} else {
			b[5] = 'A'
		}
		return string(b)
	}
	other, _ := New(Config{Htpasswd: f.htpasswd, Now: f.clk.Now})
	foreign, _, _ := other.sign(&Caller{name: "alice", kind: user, a: other}, useAccess, []Scope{{Repository, "team/a", []string{Pull}}}, time.Hour)
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, jwt.MapClaims{"iss": issuer, "sub": "alice", "aud": "stead", "use": useAccess,
		"exp": f.clk.Now().Add(time.Hour).Unix(), "iat": f.clk.Now().Unix(),
		"access": []Scope{{Repository, "team/a", []string{Pull}}}}).SignedString(jwt.UnsafeAllowNoneSignatureType)
	refresh, _, _ := f.a.sign(&Caller{name: "alice", kind: user, a: f.a}, useRefresh, nil, time.Hour)
	for name, bad := range map[string]string{
		"payload":   parts[0] + "." + flip(parts[1]) + "." + parts[2],
		"signature": parts[0] + "." + parts[1] + "." + flip(parts[2]),
		"other key": foreign,
		"alg none":  none,
		"refresh":   refresh,
	} {
		f.a.limiter = newLimiter(3, time.Minute) // each case from a fresh address
		if err := ok(bad); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: %v; want ErrUnauthenticated", name, err)
		}
	}
	f.clk.Advance(DefaultTokenTTL + TokenLeeway - time.Second)
	if err := ok(tok); err != nil {
		t.Fatalf("token before its expiry and the leeway: %v", err)
	}
	f.clk.Advance(2 * time.Second)
	if err := ok(tok); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("expired token: %v; want ErrUnauthenticated", err)
	}
}

// TestRemovedUser: a removed user's token stops working at once (it
// would at its expiry anyway), as does a refresh token when the password
// changes.
func TestRemovedUser(t *testing.T) {
	f := newFixture(t)
	tok, _ := f.token(t, basic("bob", "builder"), "repository:team/app:pull")
	q := url.Values{"grant_type": {"password"}, "username": {"bob"}, "password": {"builder"}, "access_type": {"offline"}, "scope": {"repository:team/app:pull"}}
	refresh := f.post(t, q, 200).RefreshToken
	if refresh == "" {
		t.Fatal("no refresh token for access_type=offline")
	}
	if a := f.post(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}, "scope": {"repository:team/app:pull"}}, 200); a.Scope != "repository:team/app:pull" {
		t.Fatalf("refresh granted %q", a.Scope)
	}
	write(t, f.htpasswd, htpasswdLines(t, "alice", "wonder", "bob", "new password"))
	f.post(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}}, 401)
	if err := f.check("Bearer "+tok, Repository, "team/app", Pull); err != nil {
		t.Fatalf("bob's token after a password change: %v (it lives to its expiry)", err)
	}
	write(t, f.htpasswd, htpasswdLines(t, "alice", "wonder"))
	if err := f.check("Bearer "+tok, Repository, "team/app", Pull); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("removed bob's token: %v; want ErrUnauthenticated", err)
	}
}

// TestRotatedToken: a refresh token of the static token dies when the
// token changes, though the signing key stays.
func TestRotatedToken(t *testing.T) {
	key := []byte(strings.Repeat("k", 32))
	old, _ := New(Config{Token: "old", TokenKey: key})
	tok, _, err := old.sign(&Caller{name: TokenIdentity, kind: tokenKind, a: old}, useRefresh, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.refresh(tok); err != nil {
		t.Fatalf("refresh with the same token: %v", err)
	}
	rotated, _ := New(Config{Token: "new", TokenKey: key})
	if _, err := rotated.refresh(tok); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("refresh after the token changed: %v; want ErrUnauthenticated", err)
	}
}

func (f *fixture) post(t *testing.T, form url.Values, want int) tokenAnswer {
	t.Helper()
	r := httptest.NewRequest("POST", "http://reg.example/v2/token", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.RemoteAddr = "192.0.2.9:1"
	w := httptest.NewRecorder()
	f.a.ServeToken(w, r, func(w http.ResponseWriter, _ *http.Request, err error) {
		http.Error(w, err.Error(), http.StatusUnauthorized)
	})
	var ans tokenAnswer
	if w.Code != want || (want == 200 && json.Unmarshal(w.Body.Bytes(), &ans) != nil) {
		t.Fatalf("POST token %v = %d %s; want %d", form, w.Code, w.Body, want)
	}
	return ans
}

// TestBruteForce: past FailBurst failed logins as a user, an address is
// refused even that user's right password until its bucket refills;
// other addresses are not affected, and guesses of the static token lock
// out the token, not the users.
func TestBruteForce(t *testing.T) {
	f := newFixture(t)
	// Expired tokens are no guesses: a client sending them is not locked
	// out.
	tok, _ := f.token(t, basic("alice", "wonder"), "repository:team/a:pull")
	f.clk.Advance(DefaultTokenTTL + TokenLeeway + time.Second)
	for range 5 {
		if _, err := f.a.Authenticate(request("Bearer " + tok)); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("expired token: %v", err)
		}
	}
	for range 3 {
		if _, err := f.a.Authenticate(request(basic("alice", "guess"))); !errors.Is(err, ErrUnauthenticated) {
			t.Fatal(err)
		}
	}
	if _, err := f.a.Authenticate(request(basic("alice", "wonder"))); !errors.Is(err, ErrTooManyAttempts) {
		t.Fatalf("alice after 3 failures: %v; want ErrTooManyAttempts", err)
	}
	for range 3 {
		f.a.Authenticate(request("Bearer forged"))
	}
	for _, auth := range []string{"Bearer s3cret-token", basic("token", "s3cret-token")} {
		if _, err := f.a.Authenticate(request(auth)); !errors.Is(err, ErrTooManyAttempts) {
			t.Fatalf("%q after 3 guesses of the token: %v; want ErrTooManyAttempts", auth, err)
		}
	}
	if _, err := f.a.Authenticate(request(basic("bob", "builder"))); err != nil {
		t.Fatalf("bob after guesses of alice and the token: %v", err)
	}
	f.post(t, url.Values{"grant_type": {"password"}, "username": {"alice"}, "password": {"wonder"}}, 200) // another address
	f.clk.Advance(time.Minute)
	if _, err := f.a.Authenticate(request(basic("alice", "wonder"))); err != nil {
		t.Fatalf("after a refill: %v", err)
	}
}

// TestReload: a changed access file is in force at the next request; one
// that does not parse leaves the rules before it.
func TestReload(t *testing.T) {
	f := newFixture(t)
	path := f.a.cfg.Access
	bob := basic("bob", "builder")
	if err := f.check(bob, Area, "v1", Read); !errors.Is(err, ErrDenied) {
		t.Fatal(err)
	}
	write(t, path, testRules+"  - who: [bob]\n    v1: [read]\n")
	if err := f.check(bob, Area, "v1", Read); err != nil {
		t.Fatalf("after the file changed: %v", err)
	}
	write(t, path, "rules: [{who: [bob], v1: [fly]}]\n")
	if err := f.a.Reload(); err == nil {
		t.Fatal("Reload of a bad file succeeded")
	}
	if err := f.check(bob, Area, "v1", Read); err != nil {
		t.Fatalf("after a bad file: %v; want the rules before it", err)
	}
}

func TestMatchRepo(t *testing.T) {
	for _, c := range []struct {
		pattern, name string
		want          bool
	}{
		{"**", "a/b/c", true},
		{"a/*", "a/b", true},
		{"a/*", "a/b/c", false},
		{"a/**", "a", true},
		{"a/**", "a/b/c", true},
		{"a/**", "ab", false},
		{"*/app", "team/app", true},
		{"team-?", "team-1", true},
	} {
		if got := matchRepo(c.pattern, c.name); got != c.want {
			t.Errorf("matchRepo(%q, %q) = %v", c.pattern, c.name, got)
		}
	}
}
