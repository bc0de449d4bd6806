// Package access says who a request comes from and what it may do, for
// the HTTP API, the OCI registry and the build cache alike
// (docs/guides/registry.md, "Users and access"). Identities are the
// users of an htpasswd file (bcrypt hashes only) and the server's static
// bearer token; an access file grants them, by name or group, actions on
// repository patterns and on the /v1, /cache and /metrics areas. A
// request proves who it is with HTTP Basic, the static token as a bearer,
// or a token from the registry's token endpoint (ServeToken): a JWT the
// server signs, scoped to the repositories and actions granted when it
// was issued, and checked again against the rules in force on every
// request.
package access

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/steadkit/stead/internal/clientaddr"
)

// The refusals of Check and Identified, which a front end answers in its
// own error form.
var (
	// ErrUnauthenticated: the request carries no credentials and needs
	// some, or its credentials are wrong (one message for an unknown user
	// and a wrong password).
	ErrUnauthenticated = errors.New("authentication required: wrong or missing credentials")
	// ErrDenied: the caller is known, and the rules do not grant it this.
	ErrDenied = errors.New("access denied")
	// ErrTooManyAttempts: the client's address failed to log in as this
	// user too often lately; it may try again later (RetryAfter).
	ErrTooManyAttempts = errors.New("too many failed logins as this user from this address: retry later")
)

// The actions rules grant. Repositories take pull, push and delete; the
// v1 area read, write and gc; the cache area read and write; metrics
// read.
const (
	Pull   = "pull"
	Push   = "push"
	Delete = "delete"
	Read   = "read"
	Write  = "write"
	GC     = "gc"
)

// The resource types a check or a token scope names: a repository by its
// name, an area ("v1", "cache", "metrics"), or the registry's catalog
// (name "catalog", action "*").
const (
	Repository = "repository"
	Area       = "stead"
	Registry   = "registry"
)

// TokenIdentity is the name the static bearer token goes by in access
// rules; an htpasswd file may not define a user of that name.
const TokenIdentity = "token"

// Defaults of Config.
const (
	// DefaultTokenTTL is how long a token from the token endpoint is
	// good for.
	DefaultTokenTTL = 5 * time.Minute
	// DefaultRefreshTTL is how long a refresh token is good for, unless
	// its user is removed or changes password first.
	DefaultRefreshTTL = 30 * 24 * time.Hour
	// TokenLeeway is the clock skew between servers sharing a key that
	// tokens' times (issued, not before, expiry) allow: a token lives at
	// most its TTL and TokenLeeway.
	TokenLeeway = 30 * time.Second
	// DefaultService is the service tokens are issued for.
	DefaultService = "stead"
	// DefaultFailBurst failed logins from one address are allowed at
	// once; then one per DefaultFailEvery.
	DefaultFailBurst = 10
	DefaultFailEvery = 6 * time.Second
)

// Config configures an Authority. Zero values mean the defaults.
type Config struct {
	// Token is the static bearer token, an identity named TokenIdentity.
	// Defaults to none.
	Token string
	// Htpasswd is the path of an htpasswd file of bcrypt hashes
	// (htpasswd -B), read again when its modification time or size
	// changes, or on Reload. Defaults to none.
	Htpasswd string
	// Access is the path of the access file (docs/guides/registry.md),
	// read again like Htpasswd. Defaults to none: every identity may do
	// everything, and, when there is no identity at all (no Token, no
	// Htpasswd), so may anyone.
	Access string
	// TokenKey signs and verifies tokens (HMAC-SHA256); at least 32
	// bytes. Servers that share a store behind one address must share it.
	// Defaults to a random key of this process: its tokens die with it.
	TokenKey []byte
	// TokenTTL is how long an issued token is good for. Defaults to
	// DefaultTokenTTL.
	TokenTTL time.Duration
	// Service is the service tokens name as their audience. Defaults to
	// DefaultService.
	Service string
	// PublicURL is the scheme and host clients reach the server at
	// ("https://registry.example.com"), for the token endpoint's address
	// in challenges. Defaults to the request's own Host, over https when
	// the request came over TLS.
	PublicURL string
	// FailBurst and FailEvery bound failed logins per client address (an
	// IPv6 one by its /64) and user name: FailBurst at once, then one per
	// FailEvery.
	FailBurst int
	FailEvery time.Duration
	// TrustedProxies are the peers whose X-Forwarded-For names the client
	// for the failed-login limit: the rightmost address in it that is not
	// a trusted proxy. From other peers the header is ignored. Defaults
	// to none: the client is the peer, so behind a proxy the limit is per
	// proxy address (and user name).
	TrustedProxies []netip.Prefix
	// Now reads the clock tokens and the login limit go by. Defaults to
	// time.Now.
	Now func() time.Time
	// Logger logs files that fail to reload. Defaults to slog.Default().
	Logger *slog.Logger
}

// Authority authenticates requests and applies the access rules. It is
// safe for concurrent use.
type Authority struct {
	cfg     Config
	token   [sha256.Size]byte
	users   *userFile
	rules   *ruleFile
	limiter *limiter
	// noIdentity: neither a token nor users are configured, so the
	// default rules grant anyone everything.
	noIdentity bool
	// anonymous is the caller of every request without credentials, and
	// anonymousValue its NewContext value: a Caller never changes once
	// made, so one serves them all.
	anonymous      *Caller
	anonymousValue any
}

// New returns an Authority for cfg, reading its files; an error names the
// file and line at fault.
func New(cfg Config) (*Authority, error) {
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = DefaultTokenTTL
	}
	if cfg.Service == "" {
		cfg.Service = DefaultService
	}
	if cfg.FailBurst <= 0 {
		cfg.FailBurst = DefaultFailBurst
	}
	if cfg.FailEvery <= 0 {
		cfg.FailEvery = DefaultFailEvery
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.PublicURL = strings.TrimSuffix(cfg.PublicURL, "/")
	if cfg.PublicURL != "" && !strings.HasPrefix(cfg.PublicURL, "http://") && !strings.HasPrefix(cfg.PublicURL, "https://") {
		return nil, fmt.Errorf("public URL %q: want http:// or https:// and a host", cfg.PublicURL)
	}
	if cfg.TokenKey == nil {
		cfg.TokenKey = make([]byte, 32)
		rand.Read(cfg.TokenKey)
	} else if len(cfg.TokenKey) < 32 {
		return nil, fmt.Errorf("token key of %d bytes: want at least 32", len(cfg.TokenKey))
	}
	a := &Authority{cfg: cfg, token: sha256.Sum256([]byte(cfg.Token)), limiter: newLimiter(cfg.FailBurst, cfg.FailEvery)}
	var err error
	if a.users, err = openUsers(cfg.Htpasswd, cfg.Logger); err != nil {
		return nil, err
	}
	a.noIdentity = cfg.Token == "" && cfg.Htpasswd == ""
	a.anonymous = &Caller{kind: anonymous, a: a}
	a.anonymousValue = ctxValue{a, a.anonymous, nil}
	if a.rules, err = openRules(cfg.Access, a.noIdentity, cfg.Logger); err != nil {
		return nil, err
	}
	return a, nil
}

// Reload reads the htpasswd and access files again, keeping what was in
// force when one of them fails to read or parse.
func (a *Authority) Reload() error {
	return errors.Join(a.users.reload(), a.rules.reload())
}

// Open reports whether the authority has no identity at all and no access
// file: every request may do everything, as a server without a token
// allowed.
func (a *Authority) Open() bool { return a.noIdentity && a.cfg.Access == "" }

// kind is what a caller proved.
type kind int

const (
	anonymous kind = iota // no credentials
	tokenKind             // the static token
	user                  // an htpasswd user
)

// Caller is who a request comes from, and the scopes its token carries.
type Caller struct {
	name string
	kind kind
	// scoped: the caller came with a token from the token endpoint,
	// which grants no more than scopes.
	scoped bool
	scopes []Scope
	// verified: the request carried credentials, and they are good (a
	// token for no one is credentials too).
	verified bool
	// password: the caller proved itself with a password (Basic, or the
	// token endpoint's password grant), the only credentials the token
	// endpoint gives a refresh token for.
	password bool
	a        *Authority
}

// Name is the caller's user name, TokenIdentity for the static token, ""
// for none.
func (c *Caller) Name() string { return c.name }

// Authenticate reads r's credentials: none (an anonymous caller),
// Authorization: Basic (an htpasswd user, or the user TokenIdentity with
// the static token as password), or Authorization: Bearer (the static
// token, or a token from ServeToken). Wrong passwords count against the
// client's address and the user name tried, the static token's guesses
// against the address and TokenIdentity (a token of this server's form
// that is no longer good is no guess and does not count): past the
// limit, that name from that address is refused with ErrTooManyAttempts
// until the limit refills, before its password is looked at, while other
// names from the address log in as before.
func (a *Authority) Authenticate(r *http.Request) (*Caller, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return a.anonymous, nil
	}
	return a.credentials(h, a.clientOf(r))
}

// clientOf names r's client for the failed-login limit: its peer, or
// from a trusted proxy the rightmost address of X-Forwarded-For that is
// not one (clientaddr.Of).
func (a *Authority) clientOf(r *http.Request) string {
	peer := r.RemoteAddr
	if len(a.cfg.TrustedProxies) == 0 || !a.trusted(peer) {
		return clientaddr.Of(peer)
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		ip, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break // what is left of it no trusted proxy wrote
		}
		hop := netip.AddrPortFrom(ip, 0).String()
		if !a.trusted(hop) {
			return clientaddr.Of(hop)
		}
		peer = hop
	}
	return clientaddr.Of(peer)
}

// trusted reports whether addr (host:port) is a trusted proxy's.
func (a *Authority) trusted(addr string) bool {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return false
	}
	for _, p := range a.cfg.TrustedProxies {
		if p.Contains(ap.Addr().Unmap()) {
			return true
		}
	}
	return false
}

// credentials checks an Authorization header from client.
func (a *Authority) credentials(h, client string) (*Caller, error) {
	scheme, rest, _ := strings.Cut(h, " ")
	rest = strings.TrimSpace(rest)
	switch {
	case strings.EqualFold(scheme, "Basic"):
		b, err := base64.StdEncoding.DecodeString(rest)
		name, pass, ok := strings.Cut(string(b), ":")
		if err != nil || !ok {
			return nil, ErrUnauthenticated
		}
		return a.login(client, name, pass)
	case strings.EqualFold(scheme, "Bearer"):
		if looksSigned(rest) {
			if a.cfg.Token != "" && a.isToken(rest) {
				return &Caller{name: TokenIdentity, kind: tokenKind, verified: true, a: a}, nil
			}
			return a.verify(rest)
		}
		return a.limited(client, TokenIdentity, func() (*Caller, error) {
			if a.cfg.Token != "" && a.isToken(rest) {
				return &Caller{name: TokenIdentity, kind: tokenKind, verified: true, a: a}, nil
			}
			return nil, ErrUnauthenticated
		})
	}
	return nil, ErrUnauthenticated
}

// limited runs check, a login as name from client, within the failed-login
// limit of the two: refused at once when it is spent, counted when check
// fails.
func (a *Authority) limited(client, name string, check func() (*Caller, error)) (*Caller, error) {
	key := client + "\x00" + name
	if err := a.limiter.allowed(key, a.cfg.Now()); err != nil {
		return nil, err
	}
	c, err := check()
	if err != nil {
		a.limiter.failed(key, a.cfg.Now())
	}
	return c, err
}

// isToken compares s with the static token in a time that tells nothing
// of either.
func (a *Authority) isToken(s string) bool {
	got := sha256.Sum256([]byte(s))
	return subtle.ConstantTimeCompare(got[:], a.token[:]) == 1
}

// login checks a user name and password from client: an htpasswd user's,
// or the static token's, within the failed-login limit. An unknown user
// costs the same bcrypt comparison as a known one, and is refused with
// the same error.
func (a *Authority) login(client, name, pass string) (*Caller, error) {
	return a.limited(client, name, func() (*Caller, error) {
		if name == TokenIdentity && a.cfg.Token != "" {
			if a.isToken(pass) {
				return &Caller{name: TokenIdentity, kind: tokenKind, verified: true, password: true, a: a}, nil
			}
			return nil, ErrUnauthenticated
		}
		if !a.users.check(name, pass) {
			return nil, ErrUnauthenticated
		}
		return &Caller{name: name, kind: user, verified: true, password: true, a: a}, nil
	})
}

// exists reports whether the identity of a token still exists: a removed
// user's tokens stop working at once.
func (a *Authority) exists(name string) (kind, bool) {
	switch {
	case name == "":
		return anonymous, true
	case name == TokenIdentity && a.cfg.Token != "":
		return tokenKind, true
	case name != TokenIdentity && a.users.has(name):
		return user, true
	}
	return anonymous, false
}

// May reports whether c may do action on typ/name: the rules grant it
// and, for a caller with a token, the token's scopes hold it.
func (c *Caller) May(typ, name, action string) bool {
	if !c.a.rules.current().grants(c, typ, name, action) {
		return false
	}
	if !c.scoped {
		return true
	}
	for _, s := range c.scopes {
		if s.Type == typ && s.Name == name && slices.Contains(s.Actions, action) {
			return true
		}
	}
	return false
}

type ctxKey struct{}

type ctxValue struct {
	a   *Authority
	c   *Caller
	err error
}

// NewContext returns ctx carrying a's Authenticate answer for its
// request, for Check, Identified and FromContext to read.
func (a *Authority) NewContext(ctx context.Context, c *Caller, err error) context.Context {
	if c != nil && c == a.anonymous && err == nil {
		return context.WithValue(ctx, ctxKey{}, a.anonymousValue)
	}
	return context.WithValue(ctx, ctxKey{}, ctxValue{a, c, err})
}

// AuthorityOf returns the Authority that authenticated ctx's request, nil
// for none.
func AuthorityOf(ctx context.Context) *Authority {
	v, _ := ctx.Value(ctxKey{}).(ctxValue)
	return v.a
}

// FromContext returns the caller NewContext stored, with its
// authentication error; ok is false when there is none (the request
// passed through no Authority).
func FromContext(ctx context.Context) (c *Caller, err error, ok bool) {
	v, ok := ctx.Value(ctxKey{}).(ctxValue)
	return v.c, v.err, ok
}

// Check says whether the caller of ctx may do action on typ/name: nil,
// ErrUnauthenticated (no or wrong credentials, or a token for no one),
// ErrDenied (a known caller outside its rules or its token's scopes) or
// ErrTooManyAttempts. A context without a caller (a front end served
// without an Authority in front of it) is not restricted.
func Check(ctx context.Context, typ, name, action string) error {
	c, err, ok := FromContext(ctx)
	switch {
	case !ok:
		return nil
	case err != nil:
		return err
	case c.May(typ, name, action):
		return nil
	case c.kind == anonymous:
		return ErrUnauthenticated
	}
	return ErrDenied
}

// Listed reports whether a listing (the registry's catalog) may show the
// caller of ctx typ/name: whether the rules grant it action there, whatever
// its token's scopes, which name the listing rather than what it lists.
// A context without a caller is not restricted.
func Listed(ctx context.Context, typ, name, action string) bool {
	c, err, ok := FromContext(ctx)
	return !ok || (err == nil && c.a.rules.current().grants(c, typ, name, action))
}

// ListPrefixes returns the beginnings of the names of typ a listing may
// show the caller of ctx with action (Listed): every such name starts
// with one of them, so that the listing seeks to them instead of reading
// every name. Sorted, none the beginning of another; [""] for every name
// (no caller, or an open authority), none for a caller whose credentials
// failed.
func ListPrefixes(ctx context.Context, typ, action string) []string {
	c, err, ok := FromContext(ctx)
	switch {
	case !ok || (err == nil && c.a.Open()):
		return []string{""}
	case err != nil:
		return nil
	}
	return c.a.rules.current().prefixes(c, typ, action)
}

// Identified says whether the caller of ctx proved who it is (nil), as a
// registry's base endpoint asks so that a client logs in there: with good
// credentials, or on an authority that is Open.
func Identified(ctx context.Context) error {
	c, err, ok := FromContext(ctx)
	switch {
	case !ok:
		return nil
	case err != nil:
		return err
	case c.verified || AuthorityOf(ctx).Open():
		return nil
	}
	return ErrUnauthenticated
}

// Unrestricted reports whether the caller of ctx may do everything on
// every repository: an Open authority, or no Authority at all.
func Unrestricted(ctx context.Context) bool {
	_, err, ok := FromContext(ctx)
	return !ok || (err == nil && AuthorityOf(ctx).Open())
}
