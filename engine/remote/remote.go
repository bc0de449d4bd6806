// Package remote is a stead engine over a stead server's HTTP API: the
// store a client gets from stead.Open(ctx, "http://host:7070"). It passes
// engine/enginetest like every engine; the server's engine does the work
// and decides every rule.
//
// What differs from a local engine: lock releases and claimable records
// are never signalled (WatchReleases and WatchClaimable report not live), so a
// waiting Lock or WaitClaimable polls; Cluster is the server's answer at
// Open; a sweep lease is held by the server while the client renews it, so
// a client that dies mid-sweep blocks other sweeps for up to a minute;
// Go-function liveness sources cannot cross HTTP (register them in the
// server's process); as for any network store, an error may hide a write that took
// effect (retrying is safe: every write but a chunked put's is idempotent
// or fenced, below). A lock grant the server made as its caller gave up is
// released by lock.Store, which lets an attempt finish past its context,
// and by the server when it could not deliver the answer.
//
// A value over the store's inline limit crosses the wire as an upload:
// one request begins it; over a server whose store has a bytes tier, one
// streams its bytes (Tiered is true, so the Store appends them as one
// WriteValue), else one per chunk; one publishes it. The server
// hashes the bytes as they arrive, keeps the upload's size and hash in its
// store (so any server over the same database continues it) and publishes
// it only under the key it hashes to. An upload begun with an owner (a
// registry's repository) is continued through this engine only: the
// engine remembers the owner to name it on the upload's later requests.
// Two steps of an upload are not safe to retry: an append retried after
// its first attempt landed answers an error wrapping ErrConflict (its
// offset is taken: the bytes are stored), and a retried BeginUpload
// leaves the first upload to be reaped once its lease lapses. A Store's
// put retries neither: on an error it aborts its upload and returns the
// error, and the put as a whole is safe to retry.
package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// Config says how to reach a server.
type Config struct {
	// URL is the server's base URL, http:// or https://, without user or
	// fragment. Its one parameter, insecure=true, lets Open send Token
	// over http:// to a host that is not loopback, where anyone on the
	// path can read it; without it Open refuses. Loopback hosts
	// (localhost, 127.0.0.0/8, ::1) and https:// need no parameter.
	URL string
	// Token is the bearer token the server requires, if any.
	Token string
	// Client makes the requests. Defaults to a client of its own that
	// keeps up to 64 idle connections to the server, gives up on an answer
	// whose headers take more than a minute (no call of the engine waits
	// on the server longer) and follows no redirect.
	Client *http.Client
}

// Engine is a stead engine over a server.
type Engine struct {
	base    string
	token   string
	client  *http.Client
	own     bool // client is ours to close
	closed  atomic.Bool
	shared  bool
	reason  string
	tiered  bool // the server's store has a bytes tier
	blobs   blobs
	locks   locks
	records records
	gc      gcEngine
}

// Open checks that the server answers, and the token, and returns an
// engine over it.
func Open(ctx context.Context, cfg Config) (*Engine, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("%w: remote URL: want http://host:port or https://host:port, without user", steaderr.ErrInvalidArgument)
	}
	if strings.Contains(cfg.URL, "#") {
		return nil, fmt.Errorf("%w: remote URL: a fragment (#...) would end every request's path", steaderr.ErrInvalidArgument)
	}
	insecure, err := parseQuery(u.RawQuery)
	if err != nil {
		return nil, err
	}
	u.RawQuery, u.ForceQuery = "", false
	if cfg.Token != "" && u.Scheme == "http" && !insecure && !loopback(u.Hostname()) {
		return nil, fmt.Errorf("%w: remote URL: a bearer token over http:// to %q, which is not loopback, would cross the network in clear text: use https://, or add insecure=true to the URL to send it anyway", steaderr.ErrInvalidArgument, u.Hostname())
	}
	e := &Engine{base: strings.TrimSuffix(u.String(), "/"), token: cfg.Token, client: cfg.Client}
	if e.client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64
		t.ResponseHeaderTimeout = time.Minute
		e.client = &http.Client{Transport: t, CheckRedirect: refuseRedirect}
		e.own = true
	}
	e.blobs.e, e.locks.e, e.records.e, e.gc.e = e, e, e, e
	var info wire.Info
	if _, err := e.do(ctx, http.MethodGet, "/v1/info", nil, nil, &info); err != nil {
		e.Close()
		return nil, err
	}
	e.shared, e.reason, e.tiered = info.Cluster, "server over "+info.Reason, info.Tiered
	return e, nil
}

// refuseRedirect is the own client's redirect policy: the API never
// redirects, and following one would send the bearer token along, to
// http:// on the same host in clear text.
func refuseRedirect(req *http.Request, _ []*http.Request) error {
	return fmt.Errorf("remote: the server redirected to %s; a stead server never redirects", req.URL.Redacted())
}

// parseQuery reads a remote URL's parameters: insecure (true or false,
// as strconv.ParseBool reads it) and nothing else.
func parseQuery(raw string) (insecure bool, err error) {
	query, err := url.ParseQuery(raw)
	if err != nil {
		return false, fmt.Errorf("%w: remote URL: %v", steaderr.ErrInvalidArgument, err)
	}
	for name, values := range query {
		if name != "insecure" {
			return false, fmt.Errorf("%w: remote URL: unknown parameter %q: the only one is insecure", steaderr.ErrInvalidArgument, name)
		}
		if len(values) != 1 {
			return false, fmt.Errorf("%w: remote URL: parameter %q given %d times", steaderr.ErrInvalidArgument, name, len(values))
		}
		if insecure, err = strconv.ParseBool(values[0]); err != nil {
			return false, fmt.Errorf("%w: remote URL: insecure=%q, want true or false", steaderr.ErrInvalidArgument, values[0])
		}
	}
	return insecure, nil
}

// loopback reports whether host, a URL's host without port, names this
// machine: "localhost" or a loopback IP literal. Names are not resolved.
func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// Blobs returns the engine's blob mechanics.
func (e *Engine) Blobs() blob.Backend { return &e.blobs }

// Locks returns the engine's lock mechanics.
func (e *Engine) Locks() lock.Backend { return &e.locks }

// Records returns the engine's record mechanics.
func (e *Engine) Records() record.Backend { return &e.records }

// Migrate asks the server to migrate its database.
func (e *Engine) Migrate(ctx context.Context) error {
	_, err := e.do(ctx, http.MethodPost, "/v1/schema/migrate", nil, nil, nil)
	return err
}

// SchemaVersion returns the server database's schema version and the
// newest the server knows.
func (e *Engine) SchemaVersion(ctx context.Context) (current, latest int, err error) {
	var v wire.SchemaInfo
	_, err = e.do(ctx, http.MethodGet, "/v1/schema", nil, nil, &v)
	return v.Current, v.Latest, err
}

// Cluster reports what the server's engine said at Open.
func (e *Engine) Cluster() (bool, string) { return e.shared, e.reason }

// CheckBytesTier implements engine.BytesTierChecker: the server probes
// its store's bucket (POST /v1/bytes-tier/check).
func (e *Engine) CheckBytesTier(ctx context.Context) (string, error) {
	var out wire.BytesTier
	if _, err := e.do(ctx, http.MethodPost, "/v1/bytes-tier/check", nil, nil, &out); err != nil {
		return "", err
	}
	return out.Bucket, nil
}

// Close closes the engine; the server is untouched.
func (e *Engine) Close() error {
	if e.closed.CompareAndSwap(false, true) && e.own {
		e.client.CloseIdleConnections()
	}
	return nil
}

// escape escapes a path segment, dots included, so that no name is read
// as a path step ("." or "..") or splits into two segments.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '~' || c == ':' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// request is one call's extras.
type request struct {
	header http.Header
	body   io.Reader // sent as is, instead of JSON
	query  url.Values
}

// do sends a request with in, when not nil, as its JSON body, and decodes
// a 2xx answer into out, when not nil. An error answer becomes an error
// wrapping the sentinel its code stands for.
func (e *Engine) do(ctx context.Context, method, path string, extra *request, in, out any) (*http.Response, error) {
	resp, err := e.send(ctx, method, path, extra, in)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return resp, errorOf(resp)
	}
	if out != nil {
		if err := decode(resp, out); err != nil {
			return resp, fmt.Errorf("%s %s: %w", method, path, err)
		}
	}
	return resp, nil
}

// errMalformed marks an answer the engine could not read.
var errMalformed = errors.New("remote: malformed answer")

func decode(resp *http.Response, out any) error {
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%w: %w", errMalformed, err)
	}
	return nil
}

// send sends a request and returns the answer, whatever its status.
func (e *Engine) send(ctx context.Context, method, path string, extra *request, in any) (*http.Response, error) {
	if e.closed.Load() {
		return nil, steaderr.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	target := e.base + path
	if extra != nil {
		if extra.body != nil {
			body = extra.body
		}
		if len(extra.query) > 0 {
			target += "?" + extra.query.Encode()
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, err
	}
	if extra != nil {
		for k, v := range extra.header {
			req.Header[k] = v
		}
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if e.token != "" {
		req.Header.Set("Authorization", "Bearer "+e.token)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		// url.Error names the URL, never the token; ctx errors stay
		// matchable with errors.Is.
		return nil, fmt.Errorf("remote: %w", err)
	}
	return resp, nil
}

// errorOf returns the error an error answer stands for.
func errorOf(resp *http.Response) error {
	var body wire.Error
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(b, &body) != nil || body.Code == "" {
		// A HEAD answer has no body: its code header names the error.
		body.Code = resp.Header.Get(wire.CodeHeader)
		body.Error = ""
	}
	err := wire.Err(resp.StatusCode, body)
	if body.Ref != "" {
		// A PutSet's 412 names its refused ref, as the engines do.
		return &ref.RefusedError{Name: body.Ref, Err: err}
	}
	return err
}

func query(kv ...string) url.Values {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	return q
}

// timeText formats a time for a query, "" for the zero time.
func timeText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}
