package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/internal/clientaddr"
	"github.com/steadkit/stead/internal/validate"
)

// readJSON decodes a request body of at most maxJSONBody bytes into v,
// refusing unknown fields and trailing data.
func (s *Server) readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	return s.readJSONLimit(w, r, v, maxJSONBody)
}

// readJSONLimit is readJSON with a limit. The body is read like an
// upload's: at MinBodyRate after BodyGrace, and cut off when it stalls
// during shutdown. Text that is not valid UTF-8 (raw, or a lone surrogate
// escape) is refused before decoding, which would replace it, and a
// decoded wire.Checker is checked.
func (s *Server) readJSONLimit(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	if r.ContentLength > limit {
		return refuse(wire.CodeBodyTooLarge, "request body of %d bytes, limit %d", r.ContentLength, limit)
	}
	body := s.newBodyReader(w, r)
	defer body.done()
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	body.r = r.Body
	b, err := io.ReadAll(body)
	if err != nil {
		return err
	}
	if err := validate.JSONText(b); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &badRequest{"request body: " + err.Error()}
	}
	if dec.More() {
		return &badRequest{"request body: data after the JSON value"}
	}
	if c, ok := v.(wire.Checker); ok {
		return c.Check()
	}
	return nil
}

// openBody admits a request body of at most limit declared bytes (else
// 413 with code, naming what it carries), in one of the upload slots
// (else 503 busy), and returns it read through a bodyReader; done
// releases both. A declared length over the limit is refused before a
// slot is taken.
func (s *Server) openBody(w http.ResponseWriter, r *http.Request, limit int64, code, what string) (body *bodyReader, done func(), ok bool) {
	if r.ContentLength > limit {
		writeError(w, code, fmt.Sprintf("%s of %d bytes, limit %d", what, r.ContentLength, limit))
		return nil, nil, false
	}
	release, ok := s.uploadSlot(w, r)
	if !ok {
		return nil, nil, false
	}
	body = s.newBodyReader(w, r)
	return body, func() { body.done(); release() }, true
}

// admission holds the MaxUploads slots that bodies of size (blobs,
// chunks, record saves) share, and each client's share of them.
type admission struct {
	slots     chan struct{}
	perClient int64
	mu        sync.Mutex
	clients   map[string]*clientSlots // by clientOf
}

// clientSlots is one client's share of the upload slots; users counts
// the requests holding or waiting for one, so that an idle client's entry
// goes.
type clientSlots struct {
	sem   *semaphore.Weighted
	users int
}

// uploadSlot takes one of the upload slots for r's client, or answers 503
// busy and returns false. When every slot is taken the answer is busy at
// once; a client that holds MaxUploadsPerClient already waits, without
// reading its body, for one of its own to end (up to the database
// timeout: then busy).
func (s *Server) uploadSlot(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	a := &s.uploads
	if len(a.slots) == cap(a.slots) {
		writeError(w, wire.CodeBusy, "too many uploads in progress")
		return nil, false
	}
	client := clientOf(r)
	a.mu.Lock()
	c := a.clients[client]
	if c == nil {
		if a.clients == nil {
			a.clients = map[string]*clientSlots{}
		}
		c = &clientSlots{sem: semaphore.NewWeighted(a.perClient)}
		a.clients[client] = c
	}
	c.users++
	a.mu.Unlock()
	leave := func() {
		a.mu.Lock()
		if c.users--; c.users == 0 {
			delete(a.clients, client)
		}
		a.mu.Unlock()
	}
	if !c.sem.TryAcquire(1) {
		ctx, cancel := context.WithTimeout(r.Context(), s.dbTimeout())
		err := c.sem.Acquire(ctx, 1)
		cancel()
		if err != nil {
			leave()
			writeError(w, wire.CodeBusy, "too many uploads in progress from this client")
			return nil, false
		}
	}
	select {
	case a.slots <- struct{}{}:
	default:
		c.sem.Release(1)
		leave()
		writeError(w, wire.CodeBusy, "too many uploads in progress")
		return nil, false
	}
	s.metrics.uploads.Inc()
	return func() {
		s.metrics.uploads.Dec()
		<-a.slots
		c.sem.Release(1)
		leave()
	}, true
}

// clientOf names r's client for admission (clientaddr.Of).
func clientOf(r *http.Request) string { return clientaddr.Of(r.RemoteAddr) }

// drainSet tracks the uploads in progress, so shutdown can cut off the
// stalled ones.
type drainSet struct {
	mu       sync.Mutex
	draining bool
	active   map[*bodyReader]struct{}
}

// bodyReader reads an upload body at no less than the minimum rate after
// the grace period, and at once stops a stalled body when the server
// drains.
type bodyReader struct {
	s     *Server
	r     io.Reader
	w     http.ResponseWriter
	rc    *http.ResponseController
	start time.Time
	n     int64
	ended bool // the body was read to its end
}

// drainStall is how long an upload may go without a byte while the server
// shuts down.
const drainStall = time.Second

func (s *Server) newBodyReader(w http.ResponseWriter, r *http.Request) *bodyReader {
	b := &bodyReader{s: s, r: r.Body, w: w, rc: http.NewResponseController(w), start: time.Now()}
	s.drain.mu.Lock()
	if s.drain.active == nil {
		s.drain.active = make(map[*bodyReader]struct{})
	}
	s.drain.active[b] = struct{}{}
	s.drain.mu.Unlock()
	return b
}

func (b *bodyReader) done() {
	b.s.drain.mu.Lock()
	delete(b.s.drain.active, b)
	b.s.drain.mu.Unlock()
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.ended {
		// Past the end net/http reads the connection in the background,
		// with no deadline: one set now would end the request's context
		// when it passed, however long the answer may take.
		return 0, io.EOF
	}
	deadline := b.start.Add(b.s.opts.BodyGrace + time.Duration(float64(b.n)/float64(b.s.opts.MinBodyRate)*float64(time.Second)))
	b.s.drain.mu.Lock()
	if d := time.Now().Add(drainStall); b.s.drain.draining && d.Before(deadline) {
		deadline = d
	}
	b.s.drain.mu.Unlock()
	_ = b.rc.SetReadDeadline(deadline)
	// The answer gets RequestTimeout after the body, however long the
	// body took.
	_ = b.rc.SetWriteDeadline(deadline.Add(b.s.opts.RequestTimeout))
	// The database deadline runs from the body's end, not while reading.
	moreDBTime(b.w, -1)
	n, err := b.r.Read(p)
	moreDBTime(b.w, b.s.dbTimeout())
	b.n += int64(n)
	b.ended = err == io.EOF
	if err != nil && err != io.EOF {
		err = &bodyError{err}
	}
	return n, err
}

// startDrain cuts off, within drainStall, every upload that stops
// sending.
func (s *Server) startDrain() {
	s.stop()
	s.drain.mu.Lock()
	defer s.drain.mu.Unlock()
	s.drain.draining = true
	for b := range s.drain.active {
		_ = b.rc.SetReadDeadline(time.Now().Add(drainStall))
	}
}
