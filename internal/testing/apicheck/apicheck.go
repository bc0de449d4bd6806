// Package apicheck holds the HTTP API to its document: it wraps a handler
// so that every request a test sends and every answer the server makes is
// checked against docs/openapi.yaml by two validators, kin-openapi's and
// libopenapi-validator, each on its own: a mismatch either finds fails
// the test. An answer fails when its status, a header of the API's own,
// its media type or its body is not in the document, or when the server
// accepted (2xx) a request the document refuses. Object schemas are read
// strictly: a member the document does not list is a mismatch. For tests
// only.
package apicheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	liberrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"
	"go.yaml.in/yaml/v4"
)

// Doc is the API document, loaded and validated by both validators.
type Doc struct {
	doc    *openapi3.T
	router routers.Router
	lib    validator.Validator
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
	if b, err = strict(b); err != nil {
		return nil, err
	}
	l := openapi3.NewLoader()
	doc, err := l.LoadFromData(b)
	if err != nil {
		return nil, fmt.Errorf("kin-openapi: %w", err)
	}
	if err := doc.Validate(l.Context); err != nil {
		return nil, fmt.Errorf("kin-openapi: %w", err)
	}
	// The routes match any host: tests serve on random ports.
	doc.Servers = nil
	router, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("kin-openapi: %w", err)
	}
	lib, err := loadLib(b)
	if err != nil {
		return nil, fmt.Errorf("libopenapi-validator: %w", err)
	}
	return &Doc{doc: doc, router: router, lib: lib}, nil
}

// loadLib loads the document into libopenapi-validator, which matches
// routes on the path alone (any host), and checks the document.
func loadLib(b []byte) (validator.Validator, error) {
	d, err := libopenapi.NewDocument(b)
	if err != nil {
		return nil, err
	}
	// The bearer token is the server's to check, as for kin-openapi.
	v, errs := validator.NewValidator(d, config.WithoutSecurityValidation())
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		return nil, joinLib(verrs)
	}
	return v, nil
}

// strict returns the document with every object schema that lists
// properties refusing members it does not list, unless it says otherwise:
// the suite holds the server to answering only what the document lists,
// a rule of the tests rather than of the document, whose answers may gain
// members. Both validators read the one result.
func strict(b []byte) ([]byte, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return nil, err
	}
	seen := map[*yaml.Node]bool{}
	var walk func(*yaml.Node)
	walk = func(n *yaml.Node) {
		if n == nil || seen[n] {
			return
		}
		seen[n] = true
		if n.Kind == yaml.AliasNode {
			walk(n.Alias)
			return
		}
		for _, c := range n.Content {
			walk(c)
		}
		if n.Kind == yaml.MappingNode && schemaWithProperties(n) {
			n.Content = append(n.Content,
				&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "additionalProperties"},
				&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "false"})
		}
	}
	walk(&root)
	return yaml.Marshal(&root)
}

// schemaWithProperties reports whether mapping n is an object schema
// listing properties and saying nothing of others.
func schemaWithProperties(n *yaml.Node) bool {
	props := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch n.Content[i].Value {
		case "properties":
			props = n.Content[i+1].Kind == yaml.MappingNode && len(n.Content[i+1].Content) > 0
		case "additionalProperties":
			return false
		}
	}
	return props
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

// exchange is one request and its answer, as the check sees them.
type exchange struct {
	r               *http.Request // the request as sent, its body unread
	reqBody         []byte
	reqWhole        bool // reqBody is the whole body the server read
	binary          bool // the operation's request body is binary, unchecked
	status          int
	header          http.Header
	body            []byte
	excludeRespBody bool // the answer's body is not checked: too long, a HEAD's, or binary
}

func (d *Doc) check(r *http.Request, req *recordedBody, rec *recorder) error {
	rec.mu.Lock()
	x := exchange{r: r, status: rec.code, header: rec.header, body: rec.body.Bytes()}
	bodyOver := rec.over
	rec.mu.Unlock()
	if x.status == 0 {
		x.status, x.header = http.StatusOK, http.Header{}
	}
	req.mu.Lock()
	x.reqBody, x.reqWhole = req.buf.Bytes(), req.ended && !req.over
	req.mu.Unlock()
	x.excludeRespBody = bodyOver || r.Method == http.MethodHead || isBinaryContent(x.header.Get("Content-Type"))
	if route, _, err := d.router.FindRoute(escaped(r)); err == nil {
		x.binary = isBinary(route.Operation)
	}
	var errs []error
	if err := d.checkKin(x); err != nil {
		errs = append(errs, fmt.Errorf("kin-openapi: %w", err))
	}
	if err := d.checkLib(x); err != nil {
		errs = append(errs, fmt.Errorf("libopenapi-validator: %w", err))
	}
	return errors.Join(errs...)
}

// unrouted checks the answer to a request no operation of the document
// matches: 404 route_not_found, or 405 method_not_allowed naming the
// methods served (Allow), as the document's description says.
func unrouted(x exchange, why error) error {
	code := map[int]string{http.StatusNotFound: "route_not_found", http.StatusMethodNotAllowed: "method_not_allowed"}[x.status]
	if code == "" {
		return fmt.Errorf("no operation in the document (%v), yet not answered 404 or 405", why)
	}
	var e struct{ Error, Code string }
	switch {
	case x.header.Get("Stead-Error-Code") != code:
		return fmt.Errorf("no operation, answered %d with Stead-Error-Code %q, want %q", x.status, x.header.Get("Stead-Error-Code"), code)
	case x.status == http.StatusMethodNotAllowed && x.header.Get("Allow") == "":
		return fmt.Errorf("no operation, answered 405 without Allow")
	case x.r.Method == http.MethodHead:
	case json.Unmarshal(x.body, &e) != nil || e.Code != code || e.Error == "":
		return fmt.Errorf("no operation, answered %d with body %q, want a JSON error of code %s", x.status, truncate(x.body), code)
	}
	return nil
}

// escaped returns a copy of r whose path is its escaped form, for
// kin-openapi's router: the server routes on the escaped path, as the
// document's names are percent-encoded path segments ("job%2Fone" is one
// lock name).
func escaped(r *http.Request) *http.Request {
	c := r.Clone(context.Background())
	c.URL = new(url.URL)
	*c.URL = *r.URL
	c.URL.Path, c.URL.RawPath = r.URL.EscapedPath(), ""
	return c
}

// checkKin checks x with kin-openapi, and what neither validator checks
// (headers the document does not list, a body where it has none).
func (d *Doc) checkKin(x exchange) error {
	r := escaped(x.r)
	status, header, body := x.status, x.header, x.body
	route, params, err := d.router.FindRoute(r)
	if err != nil {
		return unrouted(x, err)
	}
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
			ExcludeRequestBody: binary || !x.reqWhole,
			MultiError:         true,
		},
	}
	if !binary && x.reqWhole {
		r.Body = io.NopCloser(bytes.NewReader(x.reqBody))
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
			ExcludeResponseBody:   x.excludeRespBody,
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

// checkLib checks x with libopenapi-validator.
func (d *Doc) checkLib(x exchange) error {
	r := x.r.Clone(context.Background())
	whole := x.reqWhole && !x.binary
	r.Body = http.NoBody
	if whole {
		r.Body = io.NopCloser(bytes.NewReader(x.reqBody))
	}
	switch ct := r.Header.Get("Content-Type"); {
	case whole && len(x.reqBody) > 0 && !strings.HasPrefix(ct, "application/json") && json.Valid(x.reqBody):
		// As for kin-openapi: the server reads a JSON body whatever its
		// media type.
		r.Header.Set("Content-Type", "application/json")
	case ct == "" && (r.Method == http.MethodPut || r.Method == http.MethodPost || r.Method == http.MethodPatch):
		// What a recipient may take a body without one for (RFC 9110
		// 8.3), which the document's */* matches.
		r.Header.Set("Content-Type", "application/octet-stream")
	}
	_, reqErrs := d.lib.ValidateHttpRequestSync(r)
	var refused []*liberrors.ValidationError
	for _, e := range reqErrs {
		switch {
		case e.ValidationSubType == helpers.ValidationAmbiguousPath:
			// A path that a reading of its escapes routes elsewhere
			// (a ref name "a%2F%2Fb") names no one operation: only a
			// refusal may answer it.
			if x.status < 400 || x.status >= 500 {
				return fmt.Errorf("answered %d to a path the document routes two ways: %v", x.status, joinLib([]*liberrors.ValidationError{e}))
			}
			return nil
		case e.ValidationType == helpers.PathValidation && e.ValidationSubType != helpers.ParameterValidationPath,
			e.ValidationSubType == helpers.ValidationMissingOperation:
			return unrouted(x, joinLib([]*liberrors.ValidationError{e}))
		case e.ValidationType == helpers.RequestBodyValidation && !whole:
			// A binary body, or only part of one read: as kin-openapi's
			// check, this one excludes it.
		default:
			refused = append(refused, e)
		}
	}
	if len(refused) > 0 && x.status < 400 {
		return fmt.Errorf("the server accepted a request the document refuses: %v", joinLib(refused))
	}
	resp := &http.Response{StatusCode: x.status, Header: x.header, Body: io.NopCloser(bytes.NewReader(x.body)), Request: r}
	_, respErrs := d.lib.ValidateHttpResponse(r, resp)
	var mismatch []*liberrors.ValidationError
	for _, e := range respErrs {
		if x.excludeRespBody && e.ValidationType == helpers.ResponseBodyValidation && e.ValidationSubType != helpers.ResponseBodyResponseCode {
			continue
		}
		mismatch = append(mismatch, e)
	}
	if len(mismatch) > 0 {
		return fmt.Errorf("%v (body %q)", joinLib(mismatch), truncate(x.body))
	}
	return nil
}

// joinLib is libopenapi-validator's errors as one, each with its reason
// and the schema's own words.
func joinLib(errs []*liberrors.ValidationError) error {
	var out []error
	for _, e := range errs {
		text := e.Message
		if e.Reason != "" {
			text += ": " + e.Reason
		}
		for _, s := range e.SchemaValidationErrors {
			text += fmt.Sprintf("; %s: %s", s.FieldPath, s.Reason)
		}
		out = append(out, errors.New(text))
	}
	return errors.Join(out...)
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
