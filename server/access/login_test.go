package access

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/steadkit/stead/internal/clock"
)

// getToken asks the GET token endpoint with auth and the query q,
// returning the status and the answer.
func (f *fixture) getToken(auth string, q url.Values) (int, tokenAnswer) {
	r := httptest.NewRequest("GET", "http://reg.example/v2/token?"+q.Encode(), nil)
	r.RemoteAddr = "192.0.2.7:4242"
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	f.a.ServeToken(w, r, func(w http.ResponseWriter, _ *http.Request, err error) {
		code := http.StatusUnauthorized
		if IsBadRequest(err) {
			code = http.StatusBadRequest
		}
		http.Error(w, err.Error(), code)
	})
	var ans tokenAnswer
	_ = json.Unmarshal(w.Body.Bytes(), &ans)
	return w.Code, ans
}

// TestTokenEndpointRefusesAccessTokens: an access token is no credential
// at the token endpoint, so a narrow token cannot be traded for wider
// scopes or a refresh token.
func TestTokenEndpointRefusesAccessTokens(t *testing.T) {
	f := newFixture(t)
	narrow, _ := f.token(t, basic("alice", "wonder"), "repository:team/app:pull")
	q := url.Values{"scope": {"repository:team/other:pull,push,delete"}, "offline_token": {"true"}}
	if code, ans := f.getToken("Bearer "+narrow, q); code != http.StatusUnauthorized || ans.Token != "" || ans.RefreshToken != "" {
		t.Fatalf("token endpoint with an access token = %d %+v; want 401 and no token", code, ans)
	}
	// Nor does the refused token count as a failed login.
	for range 5 {
		f.getToken("Bearer "+narrow, q)
	}
	if _, err := f.a.Authenticate(request(basic("alice", "wonder"))); err != nil {
		t.Fatalf("alice after refused token requests: %v", err)
	}
}

// TestRefreshTokenOnlyForPasswords: a refresh token is issued for a
// password (Basic, grant_type=password) only: not for the static token as
// a bearer, nor by a refresh grant, so it cannot renew itself; it ends
// with its user.
func TestRefreshTokenOnlyForPasswords(t *testing.T) {
	f := newFixture(t)
	q := url.Values{"scope": {"repository:team/app:pull"}, "offline_token": {"true"}}
	if code, ans := f.getToken("Bearer s3cret-token", q); code != 200 || ans.RefreshToken != "" {
		t.Fatalf("static token as a bearer = %d, refresh %q; want 200 and no refresh token", code, ans.RefreshToken)
	}
	code, ans := f.getToken(basic("bob", "builder"), q)
	if code != 200 || ans.RefreshToken == "" {
		t.Fatalf("Basic with offline_token = %d; want a refresh token", code)
	}
	f.clk.Advance(24 * time.Hour)
	renewed := f.post(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {ans.RefreshToken}, "access_type": {"offline"}, "scope": {"repository:team/app:pull"}}, 200)
	if renewed.RefreshToken != "" || renewed.Scope != "repository:team/app:pull" {
		t.Fatalf("refresh grant answered refresh %q, scope %q; want an access token only", renewed.RefreshToken, renewed.Scope)
	}
	// Past its lifetime, counted from the password login, it is refused.
	f.clk.Advance(DefaultRefreshTTL)
	f.post(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {ans.RefreshToken}}, 401)
}

// TestRefreshTokenEndsWithUser: a refresh token is refused once its user
// is removed from the htpasswd file.
func TestRefreshTokenEndsWithUser(t *testing.T) {
	f := newFixture(t)
	_, ans := f.getToken(basic("bob", "builder"), url.Values{"offline_token": {"true"}})
	if ans.RefreshToken == "" {
		t.Fatal("no refresh token")
	}
	write(t, f.htpasswd, htpasswdLines(t, "alice", "wonder"))
	f.post(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {ans.RefreshToken}}, 401)
}

// TestForeignKeyTokenNotAGuess: tokens signed by another key (a server
// restarted without --token-key) are refused with the challenge, but are
// no failed logins: a client's parallel requests with its cached token do
// not lock out its address.
func TestForeignKeyTokenNotAGuess(t *testing.T) {
	f := newFixture(t)
	other, err := New(Config{Token: "s3cret-token", Htpasswd: f.htpasswd, Now: f.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := (&fixture{a: other, clk: f.clk}).token(t, basic("alice", "wonder"), "repository:team/a:pull")
	for range 10 {
		if _, err := f.a.Authenticate(request("Bearer " + tok)); !errors.Is(err, ErrUnauthenticated) {
			t.Fatalf("token of another key: %v; want ErrUnauthenticated", err)
		}
	}
	if _, err := f.a.Authenticate(request(basic("alice", "wonder"))); err != nil {
		t.Fatalf("alice after 10 requests with a previous process's token: %v", err)
	}
}

// TestLimitPerUserAndAddress: failed logins count per client address and
// user name, so one user's wrong passwords behind a shared address lock
// out neither the other users nor the static token; unknown names lock
// out no one known. The locked user is refused before its password is
// looked at (else the 429 would tell a right guess from a wrong one), and
// the 429's wait is the real refill.
func TestLimitPerUserAndAddress(t *testing.T) {
	f := newFixture(t) // 3 failures at once, then one a minute
	for range 3 {
		if _, err := f.a.Authenticate(request(basic("alice", "guess"))); !errors.Is(err, ErrUnauthenticated) || errors.Is(err, ErrTooManyAttempts) {
			t.Fatalf("alice's guess: %v", err)
		}
	}
	for _, name := range []string{"mallory", "eve", "trent", "mallory"} {
		for range 4 {
			f.a.Authenticate(request(basic(name, "guess")))
		}
	}
	for _, auth := range []string{basic("bob", "builder"), "Bearer s3cret-token", basic("token", "s3cret-token")} {
		if _, err := f.a.Authenticate(request(auth)); err != nil {
			t.Errorf("%q behind the address alice failed from: %v", auth, err)
		}
	}
	_, err := f.a.Authenticate(request(basic("alice", "wonder")))
	if !errors.Is(err, ErrTooManyAttempts) {
		t.Fatalf("alice's right password after 3 failures: %v; want ErrTooManyAttempts", err)
	}
	if got := RetryAfter(err); got != "60" {
		t.Fatalf("Retry-After %q; want 60, one login a minute", got)
	}
	f.clk.Advance(45 * time.Second)
	if _, err := f.a.Authenticate(request(basic("alice", "wonder"))); RetryAfter(err) != "15" {
		t.Fatalf("45 s later: Retry-After %q; want 15", RetryAfter(err))
	}
	f.clk.Advance(15 * time.Second)
	if _, err := f.a.Authenticate(request(basic("alice", "wonder"))); err != nil {
		t.Fatalf("after the refill: %v", err)
	}
}

// TestLimiterBounded: the failed-login table holds at most its bound of
// buckets, however many keys fail at once, evicting the one that failed
// least recently; a key failing again is kept.
func TestLimiterBounded(t *testing.T) {
	t.Parallel()
	l := newLimiter(3, time.Minute)
	l.max = 100
	now := time.Unix(1e9, 0)
	for i := range 250 {
		l.failed("kept", now)
		l.failed(strconv.Itoa(i), now)
		if n := l.len(); n > 100 {
			t.Fatalf("after %d keys: %d buckets; want at most 100", i+1, n)
		}
	}
	if l.allowed("kept", now) == nil {
		t.Fatal("the key failing all along was evicted")
	}
	if l.has("0") || !l.has("249") {
		t.Fatalf("key 0 kept %v, key 249 kept %v; want the oldest evicted, the newest kept", l.has("0"), l.has("249"))
	}
}

// TestDummyCostIsCommonCost: an unknown user is compared against a dummy
// of the cost most of the file's hashes have (the higher on a tie), so it
// takes as long as a wrong password of those users; a file of one cost
// (stead user add keeps the file's) leaves no user apart.
func TestDummyCostIsCommonCost(t *testing.T) {
	t.Parallel()
	hash := func(cost int) string {
		h, err := bcrypt.GenerateFromPassword([]byte("x"), cost)
		if err != nil {
			t.Fatal(err)
		}
		return string(h)
	}
	h4a, h4b, h5 := hash(4), hash(4), hash(5)
	for _, c := range []struct {
		file string
		want int
	}{
		{"a:" + h4a + "\nb:" + h4b + "\nc:" + h5 + "\n", 4},
		{"a:" + h5 + "\nb:" + h4a + "\nc:" + h4b + "\n", 4},
		{"a:" + h4a + "\nc:" + h5 + "\n", 5},
	} {
		h, err := parseHtpasswd([]byte(c.file))
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := bcrypt.Cost(h.dummy); got != c.want {
			t.Errorf("dummy cost %d for %q; want %d", got, c.file, c.want)
		}
		if got := HashCost([]byte(c.file)); got != c.want {
			t.Errorf("HashCost = %d for %q; want %d", got, c.file, c.want)
		}
	}
	// A file of no users has no name to tell apart: no dummy, and a user
	// added to it gets bcrypt's default cost.
	if h, err := parseHtpasswd([]byte("# no users\n")); err != nil || h.dummy != nil {
		t.Fatalf("no users: dummy %q, %v; want none", h.dummy, err)
	}
	if got := HashCost([]byte("# no users\n")); got != bcrypt.DefaultCost {
		t.Fatalf("HashCost of no users = %d; want %d", got, bcrypt.DefaultCost)
	}
}

// TestClockSkewLeeway: servers sharing a key take each other's tokens
// under a clock skew of up to TokenLeeway, and not past it.
func TestClockSkewLeeway(t *testing.T) {
	t.Parallel()
	key := []byte(strings.Repeat("k", 32))
	f := newFixture(t)
	here := clock.NewFake(clock.FakeStart)
	b, err := New(Config{Htpasswd: f.htpasswd, TokenKey: key, Now: here.Now})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		skew time.Duration
		ok   bool
	}{{2 * time.Second, true}, {-2 * time.Second, true}, {TokenLeeway, true}, {TokenLeeway + 2*time.Second, false}} {
		twin := clock.NewFake(clock.FakeStart.Add(c.skew))
		a, err := New(Config{Htpasswd: f.htpasswd, TokenKey: key, Now: twin.Now})
		if err != nil {
			t.Fatal(err)
		}
		tok, _ := (&fixture{a: a}).token(t, basic("alice", "wonder"), "repository:team/a:pull")
		if _, err := b.Authenticate(request("Bearer " + tok)); (err == nil) != c.ok {
			t.Errorf("token from a twin %v ahead: %v; want ok %v", c.skew, err, c.ok)
		}
	}
	// An expired token is taken up to the leeway past its expiry, no
	// further: a token lives at most DefaultTokenTTL + TokenLeeway.
	tok, _ := f.token(t, basic("alice", "wonder"), "repository:team/a:pull")
	f.clk.Advance(DefaultTokenTTL + TokenLeeway - time.Second)
	if err := f.check("Bearer "+tok, Repository, "team/a", Pull); err != nil {
		t.Fatalf("a second before its expiry plus the leeway: %v", err)
	}
	f.clk.Advance(2 * time.Second)
	if err := f.check("Bearer "+tok, Repository, "team/a", Pull); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("past its expiry plus the leeway: %v", err)
	}
}

// TestUserNames: names with control characters, newlines, white space, a
// colon or a leading # are refused, by HashPassword (stead user add) and
// by the htpasswd parser, which names the line.
func TestUserNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "a\nb", "a\rb", "a\x00b", "a\x7fb", "a b", "a\tb", "a\u00a0b", "#x", "a:b", "token", "@g", "*", "anonymous"} {
		if _, err := HashPassword(name, "pw", bcrypt.MinCost); err == nil {
			t.Errorf("HashPassword(%q) succeeded", name)
		}
	}
	for _, ok := range []string{"alice", "ci-bot.1", "ünïcode", "a#b"} {
		if _, err := HashPassword(ok, "pw", bcrypt.MinCost); err != nil {
			t.Errorf("HashPassword(%q): %v", ok, err)
		}
	}
	h, _ := bcrypt.GenerateFromPassword([]byte("x"), bcrypt.MinCost)
	for _, name := range []string{"a\x01b", "a\u00a0b", "a\x1bb"} {
		_, err := parseHtpasswd([]byte("alice:" + string(h) + "\n" + name + ":" + string(h) + "\n"))
		if err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Errorf("htpasswd with user %q: %v; want a refusal of line 2", name, err)
		}
	}
}

// TestScopeBounds: scopes asked again are granted once (their actions
// merged), and a request past MaxScopes distinct scopes or MaxScopeBytes
// of them is a bad request, anonymous or not.
func TestScopeBounds(t *testing.T) {
	f := newFixture(t)
	many := strings.TrimSpace(strings.Repeat("repository:team/a:pull ", 2000))
	if code, _ := f.getToken(basic("alice", "wonder"), url.Values{"scope": {many}}); code != http.StatusBadRequest {
		t.Fatalf("2000 scopes in %d bytes = %d; want 400", len(many), code)
	}
	tok, ans := f.token(t, basic("alice", "wonder"), "repository:team/a:pull", "repository:team/a:push repository:team/a:pull,pull")
	if ans.Scope != "repository:team/a:pull,push" || len(tok) > 1024 {
		t.Fatalf("repeated scopes granted %q in a token of %d bytes; want one scope", ans.Scope, len(tok))
	}
	var distinct []string
	for i := range MaxScopes + 1 {
		distinct = append(distinct, "repository:public/r"+strconv.Itoa(i)+":pull")
	}
	if code, _ := f.getToken("", url.Values{"scope": distinct}); code != http.StatusBadRequest {
		t.Fatalf("%d scopes = %d; want 400", len(distinct), code)
	}
	if code, _ := f.getToken("", url.Values{"scope": distinct[:MaxScopes]}); code != 200 {
		t.Fatalf("%d scopes = %d; want 200", MaxScopes, code)
	}
}

// TestInPlaceRewrite: a file rewritten in place is read whole or not at
// all: an empty read, as between a rewrite's truncation and its write,
// keeps the users before it until the empty file has stood for
// emptyGrace, and a file that changes while read is read again.
func TestInPlaceRewrite(t *testing.T) {
	f := newFixture(t)
	users := f.a.users.file
	var now time.Time
	users.now = func() time.Time { return now }
	write(t, f.htpasswd, "")
	fi, err := os.Stat(f.htpasswd)
	if err != nil {
		t.Fatal(err)
	}
	now = fi.ModTime()
	if _, err := f.a.Authenticate(request(basic("alice", "wonder"))); err != nil {
		t.Fatalf("alice while the file is freshly empty: %v", err)
	}
	now = fi.ModTime().Add(emptyGrace)
	if _, err := f.a.Authenticate(request(basic("alice", "wonder"))); !errors.Is(err, ErrUnauthenticated) {
		t.Fatalf("alice once the file has stood empty: %v; want ErrUnauthenticated", err)
	}
	// A change while the file is read: it is read again, whole.
	rewritten := htpasswdLines(t, "carol", "c")
	hooked := false
	users.afterRead = func() {
		if !hooked {
			hooked = true
			write(t, f.htpasswd, rewritten+"# a longer file than the first read's\n")
		}
	}
	write(t, f.htpasswd, rewritten)
	if !f.a.users.has("carol") || !hooked {
		t.Fatalf("carol after a rewrite during the read: has %v, hook ran %v", f.a.users.has("carol"), hooked)
	}
	// The access file alike: an empty read keeps the rules.
	rules := f.a.rules.file
	rules.now = func() time.Time { return now }
	write(t, f.a.cfg.Access, "")
	fi, _ = os.Stat(f.a.cfg.Access)
	now = fi.ModTime()
	if err := f.check("Bearer s3cret-token", Area, "v1", GC); err != nil {
		t.Fatalf("token's v1 gc while the access file is freshly empty: %v; want the rules before", err)
	}
}

// countingHandler counts the records logged at error level, keeping
// their text.
type countingHandler struct {
	mu      sync.Mutex
	records []string
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.Level >= slog.LevelWarn {
		s := r.Message
		r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
		h.records = append(h.records, s)
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

func (h *countingHandler) logged() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.records)
}

// TestUnreadableFileLoggedOnce: an htpasswd file that cannot be read (a
// directory in its place) or is deleted keeps its users, and is logged
// once per change of state, naming the file and what is kept.
func TestUnreadableFileLoggedOnce(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "htpasswd")
	write(t, file, htpasswdLines(t, "alice", "wonder"))
	h := &countingHandler{}
	a, err := New(Config{Htpasswd: file, Logger: slog.New(h), FailBurst: 100})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{a: a}
	alice := func(when string) {
		t.Helper()
		if _, err := f.a.Authenticate(request(basic("alice", "wonder"))); err != nil {
			t.Fatalf("alice %s: %v", when, err)
		}
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		alice("after the file was deleted")
	}
	if got := h.logged(); len(got) != 1 || !strings.Contains(got[0], file) || !strings.Contains(got[0], "users") {
		t.Fatalf("logged %q after the file was deleted; want one record naming the file and its users", got)
	}
	if err := os.Mkdir(file, 0o700); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		alice("with a directory in the file's place")
	}
	if got := h.logged(); len(got) != 2 || !strings.Contains(got[1], file) || !strings.Contains(got[1], "htpasswd") {
		t.Fatalf("logged %q with a directory in place; want one more record naming the htpasswd file", got)
	}
	os.Remove(file)
	write(t, file, htpasswdLines(t, "alice", "wonder", "bob", "builder"))
	alice("with the file back")
	if !a.users.has("bob") || len(h.logged()) != 2 {
		t.Fatalf("file back: bob %v, logged %q", a.users.has("bob"), h.logged())
	}
}

// TestListPrefixes: the beginnings of the repository names a caller may
// pull, sorted, none the beginning of another, so that a listing seeks to
// them rather than reading every repository.
func TestListPrefixes(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		auth string
		want string
	}{
		{basic("alice", "wonder"), "team"},
		{basic("bob", "builder"), "team/app"},
		{"", "public/"},
		{"Bearer s3cret-token", ""},
	} {
		caller, err := f.a.Authenticate(request(c.auth))
		got := ListPrefixes(f.a.NewContext(context.Background(), caller, err), Repository, Pull)
		if strings.Join(got, " ") != c.want || len(got) != 1 {
			t.Errorf("%q: prefixes %q; want [%q]", c.auth, got, c.want)
		}
	}
	rs, err := parseRules([]byte(`rules: [{who: [x], repositories: ["b/*", "a/**", "a/b/c", "c?d", "b/c"], registry: [pull]}, {who: [x], repositories: ["z"], registry: [push]}]`))
	if err != nil {
		t.Fatal(err)
	}
	if got := rs.prefixes(&Caller{name: "x", kind: user, a: f.a}, Repository, Pull); strings.Join(got, " ") != "a b/ c" || len(got) != 3 {
		t.Fatalf("prefixes %q; want [a b/ c]", got)
	}
	if got := ListPrefixes(context.Background(), Repository, Pull); len(got) != 1 || got[0] != "" {
		t.Fatalf("no caller: %q; want every name", got)
	}
}

// TestTrustedProxy: behind a trusted proxy the failed-login limit keys on
// the client X-Forwarded-For names (the rightmost address not a trusted
// proxy); from any other peer the header is ignored, so a client cannot
// pick its own bucket.
func TestTrustedProxy(t *testing.T) {
	f := newFixture(t)
	a, err := New(Config{Htpasswd: f.htpasswd, Now: f.clk.Now, FailBurst: 3, FailEvery: time.Minute, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	if err != nil {
		t.Fatal(err)
	}
	via := func(peer, xff, auth string) error {
		r := request(auth)
		r.RemoteAddr = peer + ":1234"
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		_, err := a.Authenticate(r)
		return err
	}
	for range 3 {
		via("10.1.1.1", "198.51.100.1, 10.2.2.2", basic("alice", "guess"))
	}
	if err := via("10.1.1.1", "198.51.100.1", basic("alice", "wonder")); !errors.Is(err, ErrTooManyAttempts) {
		t.Fatalf("alice from the client that failed: %v; want ErrTooManyAttempts", err)
	}
	if err := via("10.1.1.1", "198.51.100.2", basic("alice", "wonder")); err != nil {
		t.Fatalf("alice from another client behind the proxy: %v", err)
	}
	// An untrusted peer's header is ignored: its failures are its own.
	for i := range 3 {
		via("192.0.2.50", "198.51.100."+strconv.Itoa(10+i), basic("alice", "guess"))
	}
	if err := via("192.0.2.50", "198.51.100.99", basic("alice", "wonder")); !errors.Is(err, ErrTooManyAttempts) {
		t.Fatalf("an untrusted peer picking its X-Forwarded-For: %v; want ErrTooManyAttempts", err)
	}
	if err := via("10.1.1.1", "", basic("alice", "wonder")); err != nil {
		t.Fatalf("the proxy itself, no header: %v", err)
	}
}
