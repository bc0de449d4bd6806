// Package apicheck holds the HTTP API to its document: it wraps a handler
// so that every request a test sends and every answer the server makes is
// checked against docs/openapi.yaml with kin-openapi's validator. An
// answer fails when its status, a header of the API's own, its media type
// or its body is not in the document, or when the server accepted (2xx) a
// request the document refuses. Object schemas are read strictly: a
// member the document does not list is a mismatch. For tests only.
package apicheck

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// Doc is the API document, loaded and validated.
type Doc struct {
	doc    *openapi3.T
	router routers.Router
}

var (
	loadOnce sync.Once
	loaded   *Doc
	loadErr  error
)

// Load returns docs/openapi.yaml, loaded once per test binary, failing t
// when the document does not load or validate.
func Load(t testing.TB) *Doc {
	t.Helper()
	loadOnce.Do(func() { loaded, loadErr = load(docPath()) })
	if loadErr != nil {
		t.Fatalf("docs/openapi.yaml: %v", loadErr)
	}
	return loaded
}

// docPath is docs/openapi.yaml in the module this file is in.
func docPath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "docs", "openapi.yaml")
}

func load(path string) (*Doc, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	l := openapi3.NewLoader()
	doc, err := l.LoadFromData(b)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(l.Context); err != nil {
		return nil, err
	}
	strict(doc)
	// The routes match any host: tests serve on random ports.
	doc.Servers = nil
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	return &Doc{doc: doc, router: router}, nil
}

// strict makes every object schema with properties refuse members it
// does not list, unless it says otherwise.
func strict(doc *openapi3.T) {
	seen := map[*openapi3.Schema]bool{}
	var walk func(*openapi3.SchemaRef)
	walk = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		if len(s.Properties) > 0 && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
			s.AdditionalProperties = openapi3.AdditionalProperties{Has: openapi3.Ptr(false)}
		}
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
	}
	for _, ref := range doc.Components.Schemas {
		walk(ref)
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			if op.RequestBody != nil && op.RequestBody.Value != nil {
				for _, mt := range op.RequestBody.Value.Content {
					walk(mt.Schema)
				}
			}
			for _, r := range op.Responses.Map() {
				if r.Value != nil {
					for _, mt := range r.Value.Content {
						walk(mt.Schema)
					}
				}
			}
		}
	}
}

// Operations returns every operation the document describes, "METHOD
// /path" with the path as the document spells it.
func (d *Doc) Operations() []string {
	var out []string
	for path, item := range d.doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, method+" "+path)
		}
	}
	return out
}

// Wrap returns h with every exchange checked against d; a mismatch fails
// t (with t.Errorf, so the test goes on).
func (d *Doc) Wrap(t testing.TB, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := &recordedBody{ReadCloser: r.Body}
		r.Body = req
		rec := &recorder{ResponseWriter: w}
		// The request as sent, for the check: the handler may edit r.
		sent := r.Clone(context.WithoutCancel(r.Context()))
		h.ServeHTTP(rec, r)
		if err := d.check(sent, req, rec); err != nil {
			t.Errorf("docs/openapi.yaml: %s %s answered %d: %v", sent.Method, sent.URL.RequestURI(), rec.status(), err)
		}
	})
}

// maxKept bounds the bytes of a request or answer body kept for the
// check; a longer body's schema is not checked (the values are binary).
const maxKept = 1 << 20

// recordedBody keeps the first maxKept bytes a handler reads of a
// request body, and whether it read to the end.
type recordedBody struct {
	io.ReadCloser
	mu    sync.Mutex
	buf   bytes.Buffer
	ended bool
	over  bool
}

func (b *recordedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	if b.buf.Len()+n <= maxKept {
		b.buf.Write(p[:n])
	} else {
		b.over = true
	}
	if err == io.EOF {
		b.ended = true
	}
	b.mu.Unlock()
	return n, err
}

// recorder passes an answer on and keeps its status, headers and the
// first maxKept bytes of its body.
type recorder struct {
	http.ResponseWriter
	mu     sync.Mutex
	code   int
	header http.Header
	body   bytes.Buffer
	over   bool
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) WriteHeader(status int) {
	r.mu.Lock()
	if r.code == 0 && status >= 200 {
		r.code, r.header = status, r.ResponseWriter.Header().Clone()
	}
	r.mu.Unlock()
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	if r.code == 0 {
		r.code, r.header = http.StatusOK, r.ResponseWriter.Header().Clone()
	}
	if r.body.Len()+len(p) <= maxKept {
		r.body.Write(p)
	} else {
		r.over = true
	}
	r.mu.Unlock()
	return r.ResponseWriter.Write(p)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) status() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}

// commonHeaders are headers of HTTP itself, which the document does not
// list.
var commonHeaders = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Date": true, "Connection": true, "Transfer-Encoding": true,
	"Cache-Control": true, "Accept-Ranges": true, "Vary": true, "X-Content-Type-Options": true, "Last-Modified": true,
	"Keep-Alive": true, "Content-Encoding": true,
}

func (d *Doc) check(r *http.Request, req *recordedBody, rec *recorder) error {
	rec.mu.Lock()
	status, header, body, bodyOver := rec.code, rec.header, rec.body.Bytes(), rec.over
	rec.mu.Unlock()
	if status == 0 {
		status, header = http.StatusOK, http.Header{}
	}
	// The server routes on the escaped path, as the document's names are
	// percent-encoded path segments ("job%2Fone" is one lock name).
	routed := *r
	routed.URL = new(url.URL)
	*routed.URL = *r.URL
	routed.URL.Path, routed.URL.RawPath = r.URL.EscapedPath(), ""
	route, params, err := d.router.FindRoute(&routed)
	if err != nil {
		// No operation: the answer must say so.
		if status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
			return fmt.Errorf("no operation in the document (%v), yet not answered 404 or 405", err)
		}
		return nil
	}
	req.mu.Lock()
	reqBody, reqWhole := req.buf.Bytes(), req.ended && !req.over
	req.mu.Unlock()
	binary := isBinary(route.Operation)
	if !binary && route.Operation.RequestBody != nil && !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		// The server reads a JSON body whatever its media type (curl -d
		// sends one form-encoded), as the document says.
		r.Header.Set("Content-Type", "application/json")
	}
	in := &openapi3filter.RequestValidationInput{
		Request: r, PathParams: params, Route: route,
		Options: &openapi3filter.Options{
			AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
			ExcludeRequestBody: binary || !reqWhole,
			MultiError:         true,
		},
	}
	if !binary && reqWhole {
		r.Body = io.NopCloser(bytes.NewReader(reqBody))
	} else {
		r.Body = http.NoBody
	}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil && status < 400 {
		return fmt.Errorf("the server accepted a request the document refuses: %v", err)
	}
	resp := route.Operation.Responses.Status(status)
	if resp == nil || resp.Value == nil {
		return fmt.Errorf("status %d is not documented", status)
	}
	documented := map[string]bool{}
	for name := range resp.Value.Headers {
		documented[http.CanonicalHeaderKey(name)] = true
	}
	for name := range header {
		if commonHeaders[name] {
			continue
		}
		if !documented[name] {
			return fmt.Errorf("header %s is not documented for status %d", name, status)
		}
	}
	if len(body) > 0 && len(resp.Value.Content) == 0 {
		return fmt.Errorf("a body (%q) where the document has none", truncate(body))
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			ExcludeResponseBody:   bodyOver || r.Method == http.MethodHead || isBinaryContent(header.Get("Content-Type")),
			MultiError:            true,
		},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		return fmt.Errorf("%v (body %q)", err, truncate(body))
	}
	if ct := header.Get("Content-Type"); len(body) > 0 && resp.Value.Content.Get(ct) == nil {
		return fmt.Errorf("media type %q is not documented for status %d", ct, status)
	}
	return nil
}

// isBinary reports whether op's request body is binary (an upload),
// whose content nothing checks.
func isBinary(op *openapi3.Operation) bool {
	if op.RequestBody == nil || op.RequestBody.Value == nil {
		return false
	}
	for _, mt := range op.RequestBody.Value.Content {
		if mt.Schema != nil && mt.Schema.Value != nil && mt.Schema.Value.Format == "binary" {
			return true
		}
	}
	return false
}

func isBinaryContent(ct string) bool {
	return strings.HasPrefix(ct, "application/octet-stream") || strings.HasPrefix(ct, "multipart/byteranges") || strings.HasPrefix(ct, "text/plain")
}

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
