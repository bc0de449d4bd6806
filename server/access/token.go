package access

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Scope is one resource and the actions a token grants on it, as the
// registry token flow names them ("repository:team/app:pull,push").
type Scope struct {
	Type    string   `json:"type"`
	Name    string   `json:"name"`
	Actions []string `json:"actions"`
}

func (s Scope) String() string { return s.Type + ":" + s.Name + ":" + strings.Join(s.Actions, ",") }

// ParseScope parses "type:name:action,action"; the name may hold colons.
func ParseScope(s string) (Scope, error) {
	typ, rest, ok := strings.Cut(s, ":")
	i := strings.LastIndexByte(rest, ':')
	if !ok || i <= 0 || typ == "" {
		return Scope{}, fmt.Errorf("scope %.80q: want type:name:actions", s)
	}
	return Scope{Type: typ, Name: rest[:i], Actions: strings.Split(rest[i+1:], ",")}, nil
}

// The uses of a token.
const (
	useAccess  = "access"
	useRefresh = "refresh"
)

// issuer is the issuer tokens name.
const issuer = "stead"

type claims struct {
	jwt.RegisteredClaims
	Use    string  `json:"use"`
	Access []Scope `json:"access,omitempty"`
	// Password is the fingerprint of a refresh token's secret (its
	// user's password hash, or the static token): a new one ends it.
	Password string `json:"pwd,omitempty"`
}

// sign returns a token of use for c, good for ttl.
func (a *Authority) sign(c *Caller, use string, scopes []Scope, ttl time.Duration) (string, time.Time, error) {
	now := a.cfg.Now().Truncate(time.Second)
	id := make([]byte, 16)
	rand.Read(id)
	cl := claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: issuer, Subject: c.name, Audience: jwt.ClaimStrings{a.cfg.Service},
			IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
			ID: hex.EncodeToString(id),
		},
		Use: use, Access: scopes,
	}
	if use == useRefresh {
		cl.Password = a.fingerprint(c.kind, c.name)
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, cl).SignedString(a.cfg.TokenKey)
	return s, now, err
}

// parse checks a token's signature, issuer, audience, times and use.
func (a *Authority) parse(s, use string) (*claims, error) {
	var cl claims
	_, err := jwt.ParseWithClaims(s, &cl, func(*jwt.Token) (any, error) { return a.cfg.TokenKey, nil },
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}), jwt.WithIssuer(issuer), jwt.WithAudience(a.cfg.Service),
		jwt.WithTimeFunc(a.cfg.Now), jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithLeeway(TokenLeeway))
	switch {
	case errors.Is(err, jwt.ErrTokenInvalidClaims) && cl.Use == use:
		return nil, errStale
	case err == nil && cl.Use == use:
		return &cl, nil
	}
	if looksSigned(s) {
		return nil, errStale // another key's, or tampered with: no guess of a secret
	}
	return nil, ErrUnauthenticated
}

// looksSigned reports whether s has the form of a token this server signs
// (a JWT of its issuer), whatever its signature: no guess of the static
// token, which has not that form.
func looksSigned(s string) bool {
	var cl claims
	_, _, err := jwt.NewParser().ParseUnverified(s, &cl)
	return err == nil && cl.Issuer == issuer
}

// errStale is a token of this server's form that is not good here:
// expired, its identity gone, or signed by another key (a server restarted
// without --token-key). It is no guess of a secret (no password, and no
// static token, which is no JWT), so it does not count as a failed login:
// clients that send a stale token fetch a new one at the 401.
var errStale = fmt.Errorf("%w: the token is no longer good", ErrUnauthenticated)

// errAccessToken refuses a token from the token endpoint offered to it as
// credentials: it would trade a narrow token for wider scopes or a refresh
// token. It is no guess either, so it counts as no failed login.
var errAccessToken = fmt.Errorf("%w: a token from the token endpoint is no credential for another: log in with a password", ErrUnauthenticated)

// verify checks a bearer token from ServeToken: its identity must still
// exist.
func (a *Authority) verify(s string) (*Caller, error) {
	cl, err := a.parse(s, useAccess)
	if err != nil {
		return nil, err
	}
	k, ok := a.exists(cl.Subject)
	if !ok {
		return nil, errStale
	}
	return &Caller{name: cl.Subject, kind: k, scoped: true, scopes: cl.Access, verified: true, a: a}, nil
}

// refresh checks a refresh token: its user must exist with the password
// it had.
func (a *Authority) refresh(s string) (*Caller, error) {
	cl, err := a.parse(s, useRefresh)
	if err != nil {
		return nil, err
	}
	k, ok := a.exists(cl.Subject)
	if !ok || k == anonymous || a.fingerprint(k, cl.Subject) != cl.Password {
		return nil, ErrUnauthenticated
	}
	return &Caller{name: cl.Subject, kind: k, verified: true, a: a}, nil
}

// fingerprint names the secret an identity logs in with: a user's
// password hash, or the static token.
func (a *Authority) fingerprint(k kind, name string) string {
	if k == tokenKind {
		m := hmac.New(sha256.New, a.cfg.TokenKey)
		m.Write(a.token[:])
		return fmt.Sprintf("%x", m.Sum(nil)[:16])
	}
	return a.users.fingerprint(name)
}

// grant is the part of the requested scopes the rules give c: the same
// scopes with the actions c may take, those with none left out. It never
// grants what was not asked.
func (c *Caller) grant(requested []Scope) []Scope {
	var out []Scope
	rules := c.a.rules.current()
	for _, s := range requested {
		var acts []string
		for _, act := range s.Actions {
			if rules.grants(c, s.Type, s.Name, act) && !slices.Contains(acts, act) {
				acts = append(acts, act)
			}
		}
		if len(acts) > 0 {
			out = append(out, Scope{Type: s.Type, Name: s.Name, Actions: acts})
		}
	}
	return out
}

// Bounds of one token request's scopes, so that a token stays small.
const (
	// MaxScopes is the most distinct resources one request may ask for.
	MaxScopes = 64
	// MaxScopeBytes is the most bytes its scope parameters may add up to.
	MaxScopeBytes = 8 << 10
)

// parseScopes parses the scope parameters of a token request (each
// space-separated scopes), merging the actions of those naming one
// resource, in the order first asked; past MaxScopes resources or
// MaxScopeBytes it is a bad request.
func parseScopes(params []string) ([]Scope, error) {
	size := 0
	for _, p := range params {
		size += len(p)
	}
	if size > MaxScopeBytes {
		return nil, fmt.Errorf("%w: scopes of %d bytes: at most %d", errBadRequest, size, MaxScopeBytes)
	}
	var out []Scope
	index := map[[2]string]int{}
	for _, list := range params {
		for _, s := range strings.Fields(list) {
			sc, err := ParseScope(s)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", errBadRequest, err)
			}
			k := [2]string{sc.Type, sc.Name}
			i, ok := index[k]
			if !ok {
				if len(out) == MaxScopes {
					return nil, fmt.Errorf("%w: more than %d scopes", errBadRequest, MaxScopes)
				}
				i, index[k] = len(out), len(out)
				out = append(out, Scope{Type: sc.Type, Name: sc.Name})
			}
			for _, act := range sc.Actions {
				if !slices.Contains(out[i].Actions, act) {
					out[i].Actions = append(out[i].Actions, act)
				}
			}
		}
	}
	return out, nil
}

// Realm is the address of the token endpoint for r: PublicURL, or r's
// own host, then "/v2/token".
func (a *Authority) Realm(r *http.Request) string {
	base := a.cfg.PublicURL
	if base == "" {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + r.Host
	}
	return base + "/v2/token"
}

// Challenge is the WWW-Authenticate value of a 401 from the registry,
// naming the token endpoint, the service and, when not empty, the scope
// the request needs.
func (a *Authority) Challenge(r *http.Request, scope string) string {
	v := fmt.Sprintf(`Bearer realm=%q,service=%q`, a.Realm(r), a.cfg.Service)
	if scope != "" {
		v += fmt.Sprintf(`,scope=%q`, scope)
	}
	return v
}

// tokenAnswer is the token endpoint's answer, in the form both the
// registry token spec and OAuth2 clients read.
type tokenAnswer struct {
	Token        string `json:"token"`
	AccessToken  string `json:"access_token"`
	ExpiresIn    int    `json:"expires_in"`
	IssuedAt     string `json:"issued_at"`
	RefreshToken string `json:"refresh_token,omitempty"`
	Scope        string `json:"scope,omitempty"`
}

// ServeToken serves the registry token endpoint: GET with the scopes
// asked (?scope=…, repeated or space-separated) and Basic credentials,
// the static token as a bearer, or none (a token for an anonymous
// caller), ?offline_token=true for a refresh token too; or the OAuth2
// POST form, grant_type=password (username, password) or refresh_token
// (refresh_token), with scope and access_type=offline for a refresh
// token. The token grants the intersection of what was asked and what the
// rules allow. A token it issued is no credential here (401), and a
// refresh token is issued for a password only (Basic or the password
// grant), never for a refresh grant: a refresh token lives
// DefaultRefreshTTL from the password login that made it, and no longer
// than its user and password. refuse answers an error in the front end's
// form.
func (a *Authority) ServeToken(w http.ResponseWriter, r *http.Request, refuse func(http.ResponseWriter, *http.Request, error)) {
	var (
		c       *Caller
		err     error
		scopes  []string
		offline bool
	)
	switch r.Method {
	case http.MethodGet:
		q := r.URL.Query()
		scopes, offline = q["scope"], q.Get("offline_token") == "true"
		// The server in front may have authenticated r already: a failed
		// login counts once.
		if v, ok := r.Context().Value(ctxKey{}).(ctxValue); ok && v.a == a {
			c, err = v.c, v.err
		} else {
			c, err = a.Authenticate(r)
		}
	case http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			refuse(w, r, fmt.Errorf("%w: the form does not parse", errBadRequest))
			return
		}
		scopes, offline = r.PostForm["scope"], r.PostForm.Get("access_type") == "offline"
		switch r.PostForm.Get("grant_type") {
		case "password":
			c, err = a.login(a.clientOf(r), r.PostForm.Get("username"), r.PostForm.Get("password"))
		case "refresh_token":
			c, err = a.refresh(r.PostForm.Get("refresh_token"))
		default:
			refuse(w, r, fmt.Errorf("%w: grant_type must be password or refresh_token", errBadRequest))
			return
		}
	default:
		w.Header().Set("Allow", "GET, POST")
		refuse(w, r, fmt.Errorf("%w: GET or POST", errMethod))
		return
	}
	if err == nil && c.scoped {
		err = errAccessToken
	}
	if err != nil {
		refuse(w, r, err)
		return
	}
	requested, err := parseScopes(scopes)
	if err != nil {
		refuse(w, r, err)
		return
	}
	granted := c.grant(requested)
	tok, now, err := a.sign(c, useAccess, granted, a.cfg.TokenTTL)
	if err != nil {
		refuse(w, r, err)
		return
	}
	ans := tokenAnswer{Token: tok, AccessToken: tok, ExpiresIn: int(a.cfg.TokenTTL / time.Second), IssuedAt: now.UTC().Format(time.RFC3339)}
	for i, s := range granted {
		if i > 0 {
			ans.Scope += " "
		}
		ans.Scope += s.String()
	}
	if offline && c.password {
		if ans.RefreshToken, _, err = a.sign(c, useRefresh, nil, DefaultRefreshTTL); err != nil {
			refuse(w, r, err)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(ans)
}

// Errors of the token endpoint that are the request's fault.
var (
	errBadRequest = errors.New("bad token request")
	errMethod     = errors.New("method not allowed")
)

// IsBadRequest reports whether err, from ServeToken's refuse, is a
// malformed request (400); IsMethod, a wrong method (405).
func IsBadRequest(err error) bool { return errors.Is(err, errBadRequest) }
func IsMethod(err error) bool     { return errors.Is(err, errMethod) }
