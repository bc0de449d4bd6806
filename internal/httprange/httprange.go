// Package httprange is the Range handling every blob answer shares (the
// API's /v1/blobs and the registry's /v2/ blobs): what http.ServeContent
// gets wrong in a Range header, judged before it serves, and the content
// of a HEAD answer, which has a size and no bytes.
package httprange

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxRanges is the most ranges one request may ask for; more are ignored
// (the whole content is sent), so a request cannot multiply the answer's
// size with thousands of tiny parts.
const MaxRanges = 16

// Verdict is what Check makes of a Range header.
type Verdict int

const (
	// Serve: pass the header Check returns to http.ServeContent.
	Serve Verdict = iota
	// Unsatisfiable: answer 416 with Content-Range "bytes */size".
	Unsatisfiable
	// Ignored: send the whole content (drop the header).
	Ignored
)

// Check judges what http.ServeContent gets wrong in a Range header,
// returning the header to pass on: a zero-length suffix ("bytes=-0") is
// unsatisfiable (RFC 9110 14.1.1) and dropped, unsatisfiable when alone;
// more than MaxRanges ranges are ignored. The rest is ServeContent's to
// parse.
func Check(header string) (Verdict, string) {
	specs, ok := strings.CutPrefix(header, "bytes=")
	if !ok {
		return Serve, header
	}
	var kept []string
	n := 0
	for spec := range strings.SplitSeq(specs, ",") {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			continue
		}
		n++
		if suffix, ok := strings.CutPrefix(spec, "-"); ok && suffix != "" && strings.Trim(suffix, "0") == "" {
			continue
		}
		kept = append(kept, spec)
	}
	switch {
	case n > MaxRanges:
		return Ignored, ""
	case n > 0 && len(kept) == 0:
		return Unsatisfiable, ""
	}
	return Serve, "bytes=" + strings.Join(kept, ",")
}

// Content is what ServeContent answers: its size, and its bytes.
type Content interface {
	io.ReadSeeker
	Size() int64
}

// ServeContent answers r with content as http.ServeContent does (for GET
// and HEAD alike: 200, 206 with the ranges asked, 304, 412, 416), with
// its Range header judged by Check first. An unsatisfiable one gets
// Content-Range "bytes */size" and unsatisfiable, which writes the 416
// answer in the caller's error form; a Range of an empty value is
// answered 200 with the value. Content is immutable: no
// Last-Modified.
func ServeContent(w http.ResponseWriter, r *http.Request, content Content, unsatisfiable func(w http.ResponseWriter)) {
	verdict, ranges := Check(r.Header.Get("Range"))
	switch {
	case verdict == Unsatisfiable:
		w.Header().Set("Content-Range", "bytes */"+strconv.FormatInt(content.Size(), 10))
		unsatisfiable(w)
		return
	case verdict == Ignored, content.Size() == 0:
		// An empty value has no range to send (RFC 9110 14.1.2): the
		// whole of it, nothing, is the answer.
		r.Header.Del("Range")
	case r.Header.Get("Range") != "":
		r.Header.Set("Range", ranges)
	}
	http.ServeContent(w, r, "", time.Time{}, content)
}

// SizeOnly is a HEAD answer's content: its size, without its bytes.
// http.ServeContent seeks it to learn the size and sends no body for
// HEAD; what it reads (for a multi-range answer's parts) fails.
type SizeOnly struct{ size, off int64 }

// NewSizeOnly returns the content of a HEAD answer of size bytes.
func NewSizeOnly(size int64) *SizeOnly { return &SizeOnly{size: size} }

// Size is the content's size.
func (c *SizeOnly) Size() int64 { return c.size }

// Seek moves the offset as io.Seeker says.
func (c *SizeOnly) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		offset += c.off
	case io.SeekEnd:
		offset += c.size
	}
	if offset < 0 {
		return c.off, errors.New("seek before the start")
	}
	c.off = offset
	return offset, nil
}

// Read fails: a HEAD answer has no body.
func (c *SizeOnly) Read([]byte) (int, error) { return 0, errors.New("a HEAD answer has no body") }

// ServeHeld is ServeContent with the answer's status and headers held
// back until the content's first byte: when the first read fails (a
// value whose stored bytes are lost), nothing is sent, the headers
// ServeContent set are removed, and ServeHeld returns the error with sent
// false, for the caller to answer it. A read failing after the answer
// began returns its error with sent true: the answer is short of its
// Content-Length, which every client detects.
func ServeHeld(w http.ResponseWriter, r *http.Request, content Content, unsatisfiable func(w http.ResponseWriter)) (sent bool, err error) {
	held := &heldAnswer{ResponseWriter: w}
	failing := &readFailure{Content: content}
	ServeContent(held, r, failing, unsatisfiable)
	if failing.err != nil && !held.sent {
		for _, name := range []string{"Content-Length", "Content-Range", "Content-Type", "Accept-Ranges", "ETag", "Cache-Control", "Last-Modified"} {
			w.Header().Del(name)
		}
		return false, failing.err
	}
	held.send()
	return true, failing.err
}

// readFailure keeps the first error reading its content returned.
type readFailure struct {
	Content
	err error
}

func (c *readFailure) Read(p []byte) (int, error) {
	n, err := c.Content.Read(p)
	if err != nil && err != io.EOF && c.err == nil {
		c.err = err
	}
	return n, err
}

// heldAnswer holds back an answer's status until its first byte.
type heldAnswer struct {
	http.ResponseWriter
	status int
	sent   bool
}

func (h *heldAnswer) WriteHeader(code int) {
	if !h.sent && h.status == 0 {
		h.status = code
	}
}

func (h *heldAnswer) Write(p []byte) (int, error) {
	h.send()
	return h.ResponseWriter.Write(p)
}

// send sends the status held back, if any.
func (h *heldAnswer) send() {
	if !h.sent {
		h.sent = true
		if h.status != 0 {
			h.ResponseWriter.WriteHeader(h.status)
		}
	}
}

func (h *heldAnswer) Unwrap() http.ResponseWriter { return h.ResponseWriter }
