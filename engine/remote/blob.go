package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/steaderr"
)

type blobs struct{ e *Engine }

// Put uploads the value, or publishes the upload p.Chunks (the server
// checks that its chunks hash to p.Key first), pinned for p.Owner and p.TTL from p.Now
// (zero: the server's clock): the server takes exactly the pin asked for,
// so the portable store's hot-key skip, which trusts its own pin
// deadlines, stays safe over HTTP.
func (b *blobs) Put(ctx context.Context, p blob.PutParams) error {
	q := query("now", timeText(p.Now))
	q.Set("owner", p.Owner) // even empty: the server refuses it rather than pin as itself
	q.Set("ttl", p.TTL.String())
	if p.Chunks == 0 && len(p.Children) > wire.MaxHeaderChildren {
		// More children than a header holds go through an upload, whose
		// publish carries any number in its body.
		if len(p.Value) == 0 {
			return fmt.Errorf("%w: an empty blob declares at most %d children over HTTP, not %d", steaderr.ErrInvalidArgument, wire.MaxHeaderChildren, len(p.Children))
		}
		return b.putThroughUpload(ctx, p)
	}
	if p.Chunks != 0 {
		_, err := b.e.do(ctx, http.MethodPost, chunkSetPath(p.Chunks)+"/publish", &request{query: q},
			wire.Publish{Key: p.Key.String(), Size: p.Size, Children: keyTexts(p.Children)}, nil)
		return err
	}
	req := &request{body: bytes.NewReader(p.Value), query: q}
	if len(p.Children) > 0 {
		req.header = http.Header{wire.ChildrenHeader: {strings.Join(keyTexts(p.Children), ",")}}
	}
	_, err := b.e.do(ctx, http.MethodPut, "/v1/blobs/"+p.Key.String(), req, nil, nil)
	return err
}

// putThroughUpload puts an inline value as a one-chunk upload, published
// with its children; the upload is aborted whatever happens (after a
// publish the abort finds nothing).
func (b *blobs) putThroughUpload(ctx context.Context, p blob.PutParams) (err error) {
	set, err := b.BeginUpload(ctx, blob.BeginUploadParams{Lease: blob.DefaultUploadLease, Now: p.Now})
	if err != nil {
		return err
	}
	defer func() {
		if aerr := b.AbortUpload(context.WithoutCancel(ctx), set); aerr != nil && err == nil {
			err = fmt.Errorf("discard the staged value (the upload lease reaps it): %w", aerr)
		}
	}()
	if len(p.Value) > 0 {
		if err := b.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Data: p.Value, Lease: blob.DefaultUploadLease, Now: p.Now}); err != nil {
			return err
		}
	}
	p.Chunks, p.Size, p.Value = set, int64(len(p.Value)), nil
	return b.Put(ctx, p)
}

// Get reads key's stored form; an answer over wire.MaxStored bytes is an
// error, whatever its Content-Length says.
func (b *blobs) Get(ctx context.Context, key blob.Key) (blob.Stored, error) {
	resp, err := b.e.send(ctx, http.MethodGet, "/v1/blobs/"+key.String()+"/stored", nil, nil)
	if err != nil {
		return blob.Stored{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return blob.Stored{}, errorOf(resp)
	}
	var st wire.Stored
	if err := json.NewDecoder(io.LimitReader(resp.Body, wire.MaxStored)).Decode(&st); err != nil {
		return blob.Stored{}, fmt.Errorf("remote: blob %s: %w: %w", key, errMalformed, err)
	}
	inline := st.Chunks == 0 && st.Object == ""
	switch {
	case st.Size < 0 || st.Chunks < 0,
		inline && int64(len(st.Value)) != st.Size,
		!inline && len(st.Value) != 0,
		st.Chunks != 0 && st.Object != "",
		st.Object != "" && (st.Size == 0 || len(st.Object) > wire.MaxObjectName):
		return blob.Stored{}, fmt.Errorf("remote: blob %s: %w: inconsistent stored form", key, errMalformed)
	}
	if st.Value == nil && inline {
		st.Value = []byte{}
	}
	return blob.Stored{Size: st.Size, Value: st.Value, Chunks: blob.ChunkSet(st.Chunks), Object: st.Object}, nil
}

// Tiered implements blob.Streamer: a remote store's puts stage chunks on
// the server, which keeps any bytes tier behind its own store.
func (b *blobs) Tiered() bool { return false }

// WriteValue implements blob.Streamer: refused, the client has no bucket.
func (b *blobs) WriteValue(context.Context, blob.WriteValueParams) (int64, error) {
	return 0, fmt.Errorf("%w: a remote store writes no bucket object of its own", steaderr.ErrInvalidArgument)
}

// ReadValue implements blob.Streamer: the server reads the object it
// named in the stored form and streams its bytes as a range of GET
// /v1/blobs/{key}. An answer that breaks off before its end is an error
// wrapping steaderr.ErrUnavailable.
func (b *blobs) ReadValue(ctx context.Context, p blob.ReadValueParams) (io.ReadCloser, error) {
	if p.Off < 0 {
		return nil, fmt.Errorf("%w: negative offset %d", steaderr.ErrInvalidArgument, p.Off)
	}
	spec := "bytes=" + strconv.FormatInt(p.Off, 10) + "-"
	if p.N >= 0 {
		if p.N == 0 {
			return io.NopCloser(strings.NewReader("")), nil
		}
		spec += strconv.FormatInt(p.Off+p.N-1, 10)
	}
	resp, err := b.e.send(ctx, http.MethodGet, "/v1/blobs/"+p.Key.String(), &request{header: http.Header{"Range": {spec}}}, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusPartialContent {
		defer resp.Body.Close()
		if resp.StatusCode >= 300 {
			return nil, errorOf(resp)
		}
		return nil, fmt.Errorf("remote: blob %s: %w: %d to a range request", p.Key, errMalformed, resp.StatusCode)
	}
	var first, last, size int64
	n, err := fmt.Sscanf(resp.Header.Get("Content-Range"), "bytes %d-%d/%d", &first, &last, &size)
	want := last - first + 1
	if err != nil || n != 3 || first != p.Off || last < first || last >= size || (p.N >= 0 && want != p.N) || (p.N < 0 && last != size-1) || resp.ContentLength != want {
		resp.Body.Close()
		return nil, fmt.Errorf("remote: blob %s: %w: Content-Range %q, %d bytes, to %s", p.Key, errMalformed, resp.Header.Get("Content-Range"), resp.ContentLength, spec)
	}
	if size != p.Size {
		resp.Body.Close()
		return nil, fmt.Errorf("remote: blob %s: %w: the server serves %d bytes, not the value's %d", p.Key, steaderr.ErrCorrupt, size, p.Size)
	}
	return &rangeBody{key: p.Key, body: resp.Body, left: want}, nil
}

// rangeBody reads the bytes of a range answer, telling an answer that
// broke off (the server's read failed mid-answer, or the connection did)
// from the end of the range.
type rangeBody struct {
	key  blob.Key
	body io.ReadCloser
	left int64
}

func (r *rangeBody) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	n, err := r.body.Read(p[:min(int64(len(p)), r.left)])
	r.left -= int64(n)
	switch {
	case r.left == 0:
		return n, io.EOF
	case err != nil:
		return n, fmt.Errorf("remote: blob %s: %w: the answer broke off %d bytes before its end: %v", r.key, steaderr.ErrUnavailable, r.left, err)
	}
	return n, nil
}

func (r *rangeBody) Close() error { return r.body.Close() }

func (b *blobs) BeginUpload(ctx context.Context, p blob.BeginUploadParams) (blob.ChunkSet, error) {
	var up wire.Upload
	req := &request{query: query("lease", p.Lease.String(), "now", timeText(p.Now))}
	if _, err := b.e.do(ctx, http.MethodPost, "/v1/uploads", req, nil, &up); err != nil {
		return 0, err
	}
	if up.Chunks <= 0 {
		return 0, fmt.Errorf("remote: begin upload: %w: chunk set %d", errMalformed, up.Chunks)
	}
	return blob.ChunkSet(up.Chunks), nil
}

func (b *blobs) WriteChunk(ctx context.Context, p blob.WriteChunkParams) error {
	if len(p.Data) > wire.MaxChunk {
		return fmt.Errorf("%w: a chunk of %d bytes; a server takes at most %d", steaderr.ErrInvalidArgument, len(p.Data), wire.MaxChunk)
	}
	req := &request{body: bytes.NewReader(p.Data), query: query("lease", p.Lease.String(), "now", timeText(p.Now))}
	_, err := b.e.do(ctx, http.MethodPut, chunkPath(p.Set, p.Off), req, nil, nil)
	return err
}

func (b *blobs) AbortUpload(ctx context.Context, set blob.ChunkSet) error {
	_, err := b.e.do(ctx, http.MethodDelete, chunkSetPath(set), nil, nil, nil)
	return err
}

func (b *blobs) ReapUploads(ctx context.Context, p blob.ReapUploadsParams) (int, error) {
	var r wire.Reaped
	_, err := b.e.do(ctx, http.MethodPost, "/v1/uploads/reap", &request{query: query("now", timeText(p.Now))}, nil, &r)
	return r.Reaped, err
}

// ReadChunk reads at most wire.MaxChunk bytes of the answer, whatever its
// Content-Length says.
func (b *blobs) ReadChunk(ctx context.Context, set blob.ChunkSet, off int64) (int64, []byte, error) {
	resp, err := b.e.send(ctx, http.MethodGet, chunkPath(set, off), nil, nil)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, nil, errorOf(resp)
	}
	start, err := strconv.ParseInt(resp.Header.Get(wire.ChunkStartHeader), 10, 64)
	if err != nil || start < 0 || start > off {
		return 0, nil, fmt.Errorf("remote: chunk %d@%d: %w: chunk start %q", set, off, errMalformed, resp.Header.Get(wire.ChunkStartHeader))
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, wire.MaxChunk+1))
	switch {
	case err != nil:
		return 0, nil, fmt.Errorf("remote: chunk %d@%d: %w", set, off, err)
	case len(data) > wire.MaxChunk:
		return 0, nil, fmt.Errorf("remote: chunk %d@%d: %w: over %d bytes", set, off, errMalformed, wire.MaxChunk)
	case resp.ContentLength >= 0 && int64(len(data)) != resp.ContentLength:
		return 0, nil, fmt.Errorf("remote: chunk %d@%d: %w", set, off, io.ErrUnexpectedEOF)
	}
	return start, data, nil
}

// The paths of an upload and of one of its chunks.
func chunkSetPath(set blob.ChunkSet) string {
	return "/v1/uploads/" + strconv.FormatInt(int64(set), 10)
}

func chunkPath(set blob.ChunkSet, off int64) string {
	return "/v1/chunks/" + strconv.FormatInt(int64(set), 10) + "/" + strconv.FormatInt(off, 10)
}

func (b *blobs) Stat(ctx context.Context, key blob.Key) (blob.Info, error) {
	resp, err := b.e.do(ctx, http.MethodHead, "/v1/blobs/"+key.String(), nil, nil, nil)
	if err != nil {
		return blob.Info{}, err
	}
	size, err := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64)
	if err != nil {
		return blob.Info{}, fmt.Errorf("remote: blob %s: no size in the answer", key)
	}
	return blob.Info{Key: key, Size: size}, nil
}

// List asks for pages of at most wire.MaxListLimit blobs, the server's
// page bound, until it has limit blobs or a page comes back short: a limit
// up to wire.MaxListLimit is one request, so one snapshot on the server;
// a longer one is a page walk, a snapshot a page.
func (b *blobs) List(ctx context.Context, after blob.Key, limit int, yield func(blob.Info) bool) error {
	if limit < 1 {
		return fmt.Errorf("%w: list limit %d, want at least 1", steaderr.ErrInvalidArgument, limit)
	}
	for limit > 0 {
		n := min(limit, wire.MaxListLimit)
		page, err := b.page(ctx, after, n)
		if err != nil {
			return err
		}
		for _, info := range page {
			if !yield(info) {
				return nil
			}
		}
		if len(page) < n {
			return nil
		}
		limit -= n
		after = page[n-1].Key
	}
	return nil
}

// pageEntryBytes bounds the JSON of one blob in a page answer (a compact
// one takes about 100 bytes), so that reading a page of n blobs takes at
// most n times that, whatever the server sends.
const pageEntryBytes = 512

// page reads one page of at most n blobs after after and refuses an
// answer longer than n, out of key order, or larger than n blobs take.
func (b *blobs) page(ctx context.Context, after blob.Key, n int) ([]blob.Info, error) {
	q := url.Values{"limit": {strconv.Itoa(n)}}
	if !after.IsZero() {
		q.Set("after", after.String())
	}
	resp, err := b.e.send(ctx, http.MethodGet, "/v1/blobs", &request{query: q}, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, errorOf(resp)
	}
	var out wire.BlobPage
	if err := json.NewDecoder(io.LimitReader(resp.Body, int64(n+1)*pageEntryBytes)).Decode(&out); err != nil {
		return nil, fmt.Errorf("blob list: %w: %w", errMalformed, err)
	}
	if len(out.Blobs) > n {
		return nil, fmt.Errorf("blob list: %w: %d blobs for a limit of %d", errMalformed, len(out.Blobs), n)
	}
	page := make([]blob.Info, len(out.Blobs))
	last := after
	for i, w := range out.Blobs {
		key, err := blob.ParseKey(w.Key)
		if err != nil || key.Compare(last) <= 0 || w.Size < 0 {
			return nil, fmt.Errorf("blob list: %w: %.80q (size %d) after %s", errMalformed, w.Key, w.Size, last)
		}
		page[i], last = blob.Info{Key: key, Size: w.Size}, key
	}
	return page, nil
}

// Delete arbitrates the keys with POST /v1/blobs/delete, a thousand keys
// (a server's transaction) a request.
func (b *blobs) Delete(ctx context.Context, p blob.DeleteParams) ([]blob.Verdict, error) {
	var all []blob.Verdict
	for keys := range slices.Chunk(p.Keys, 1000) {
		var out wire.Verdicts
		if _, err := b.e.do(ctx, http.MethodPost, "/v1/blobs/delete", nil, wire.DeleteBlobs{Keys: keyTexts(keys), Now: p.Now}, &out); err != nil {
			return nil, err
		}
		vs, err := readVerdicts(keys, out)
		if err != nil {
			return nil, err
		}
		all = append(all, vs...)
	}
	return all, nil
}
