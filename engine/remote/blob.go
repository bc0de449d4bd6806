package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/steaderr"
)

type blobs struct {
	e *Engine

	mu      sync.Mutex
	uploads map[blob.ChunkSet]upload // the uploads begun or appended to here
}

// upload is what the engine last committed to an upload: its owner, and
// the size and state its caller gave with it.
type upload struct {
	owner string
	size  int64
	state []byte
}

// Put uploads the value, or publishes the upload p.Chunks (the server
// checks that the bytes it hashed as they arrived hash to p.Key first), pinned for p.Owner and p.TTL from p.Now
// (zero: the server's clock): the server takes exactly the pin asked for,
// so the portable store's hot-key skip, which trusts its own pin
// deadlines, stays safe over HTTP. The server answers 201 Created when the
// put stored the blob, 200 when it was stored already.
func (b *blobs) Put(ctx context.Context, p blob.PutParams) (bool, error) {
	q := query("now", timeText(p.Now))
	q.Set("owner", p.Owner) // even empty: the server refuses it rather than pin as itself
	q.Set("ttl", p.TTL.String())
	if p.Chunks == 0 && len(p.Children) > wire.MaxHeaderChildren {
		// More children than a header holds go through an upload, whose
		// publish carries any number in its body.
		if len(p.Value) == 0 {
			return false, fmt.Errorf("%w: an empty blob declares at most %d children over HTTP, not %d", steaderr.ErrInvalidArgument, wire.MaxHeaderChildren, len(p.Children))
		}
		return b.putThroughUpload(ctx, p)
	}
	if p.Chunks != 0 {
		if owner := b.owner(p.Chunks); owner != "" {
			q.Set(wire.UploadOwnerParam, owner)
		}
		resp, err := b.e.do(ctx, http.MethodPost, uploadPath(p.Chunks)+"/publish", &request{query: q},
			wire.Publish{Key: p.Key.String(), Size: p.Size, Children: keyTexts(p.Children)}, nil)
		if err != nil {
			return false, err
		}
		b.forget(p.Chunks)
		return resp.StatusCode == http.StatusCreated, nil
	}
	req := &request{body: bytes.NewReader(p.Value), query: q}
	if len(p.Children) > 0 {
		req.header = http.Header{wire.ChildrenHeader: {strings.Join(keyTexts(p.Children), ",")}}
	}
	resp, err := b.e.do(ctx, http.MethodPut, "/v1/blobs/"+p.Key.String(), req, nil, nil)
	if err != nil {
		return false, err
	}
	return resp.StatusCode == http.StatusCreated, nil
}

// putThroughUpload puts an inline value as a one-chunk upload, published
// with its children; the upload is aborted whatever happens (after a
// publish the abort finds nothing).
func (b *blobs) putThroughUpload(ctx context.Context, p blob.PutParams) (created bool, err error) {
	set, err := b.BeginUpload(ctx, blob.BeginUploadParams{Lease: blob.DefaultUploadLease, Now: p.Now})
	if err != nil {
		return false, err
	}
	defer func() {
		if aerr := b.AbortUpload(context.WithoutCancel(ctx), set); aerr != nil && err == nil {
			err = fmt.Errorf("discard the staged value (the upload lease reaps it): %w", aerr)
		}
	}()
	if len(p.Value) > 0 {
		if err := b.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Data: p.Value, Lease: blob.DefaultUploadLease, Now: p.Now}); err != nil {
			return false, err
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
	return readStored(key, st)
}

// readStored checks a stored form the server answered for key.
func readStored(key blob.Key, st wire.Stored) (blob.Stored, error) {
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

// Tiered implements blob.Streamer: what the server said at Open of its
// store. Over a tiered store a remote store's uploads stream past the
// inline limit as one append each (WriteValue), which the server keeps in
// its bucket; over another they go chunk by chunk, as a local store's do.
func (b *blobs) Tiered() bool { return b.e.tiered }

// WriteValue implements blob.Streamer: p.Value streams as the body of
// one append request, one object on the server's tier, its lease from p.Now() as the request is sent,
// which the server hashes as it arrives; p.State is called once the
// server took it, its state kept for UploadStatus (the server keeps its
// own, the one it trusts). A value of no bytes appends nothing. An append whose
// body broke off (the connection, p.Value failing) may leave the
// upload's size unchanged or, on a server without a bytes tier, grown by
// whole chunks: UploadStatus tells.
func (b *blobs) WriteValue(ctx context.Context, p blob.WriteValueParams) (int64, error) {
	if p.Off < 0 {
		return 0, fmt.Errorf("%w: negative offset %d", steaderr.ErrInvalidArgument, p.Off)
	}
	var first [1]byte
	n, err := io.ReadFull(p.Value, first[:])
	switch {
	case n == 0 && err == io.EOF:
		if p.State != nil {
			b.committed(p.Set, b.owner(p.Set), p.Off, p.State())
		}
		return 0, nil
	case n == 0:
		return 0, err
	}
	body := io.MultiReader(bytes.NewReader(first[:]), p.Value)
	// Hidden behind a reader of no known length, the body is sent
	// chunked, as it is read.
	var now time.Time
	if p.Now != nil {
		now = p.Now()
	}
	size, err := b.append(ctx, p.Set, p.Off, struct{ io.Reader }{body}, p.Lease, now, "object", "true")
	if err != nil {
		return 0, err
	}
	if p.State != nil {
		b.committed(p.Set, b.owner(p.Set), size, p.State())
	}
	return size - p.Off, nil
}

// ReadValue implements blob.Streamer: the server reads the object it
// named (in the stored form, or a chunk read's answer) and streams its
// bytes as a range of GET /v1/blobs/{key}: the object's bytes [p.Off,
// p.Off+p.N) are the value's from p.At+p.Off. An answer that breaks off
// before its end is an error wrapping steaderr.ErrUnavailable; one whose
// value is shorter than the object's end, steaderr.ErrCorrupt.
func (b *blobs) ReadValue(ctx context.Context, p blob.ReadValueParams) (io.ReadCloser, error) {
	if p.Off < 0 || p.At < 0 || p.Size < 0 || p.At > math.MaxInt64-p.Size {
		return nil, fmt.Errorf("%w: object range at %d, offset %d, size %d", steaderr.ErrInvalidArgument, p.At, p.Off, p.Size)
	}
	from := p.At + p.Off
	spec := "bytes=" + strconv.FormatInt(from, 10) + "-"
	var want int64
	switch {
	case p.N == 0:
		return io.NopCloser(strings.NewReader("")), nil
	case p.N > 0:
		if p.N-1 > math.MaxInt64-from {
			return nil, fmt.Errorf("%w: object range of %d bytes from %d", steaderr.ErrInvalidArgument, p.N, from)
		}
		want = p.N
	case p.Off >= p.Size:
		return io.NopCloser(strings.NewReader("")), nil
	default:
		want = p.Size - p.Off
	}
	spec += strconv.FormatInt(from+want-1, 10)
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
	if err != nil || n != 3 || first != from || last != from+want-1 || last >= size || resp.ContentLength != want {
		resp.Body.Close()
		return nil, fmt.Errorf("remote: blob %s: %w: Content-Range %q, %d bytes, to %s", p.Key, errMalformed, resp.Header.Get("Content-Range"), resp.ContentLength, spec)
	}
	if size < p.At+p.Size {
		resp.Body.Close()
		return nil, fmt.Errorf("remote: blob %s: %w: the server serves %d bytes, short of the object's end at %d", p.Key, steaderr.ErrCorrupt, size, p.At+p.Size)
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

// maxUploads bounds the uploads the engine remembers (each at most
// blob.MaxUploadOwner + blob.MaxUploadState bytes).
const maxUploads = 1024

// owner returns the owner set was begun for through this engine ("" when
// it was not, or is forgotten).
func (b *blobs) owner(set blob.ChunkSet) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.uploads[set].owner
}

// committed records that set holds size bytes with state, as this
// engine's caller said, forgetting another upload's when full.
func (b *blobs) committed(set blob.ChunkSet, owner string, size int64, state []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.uploads == nil {
		b.uploads = map[blob.ChunkSet]upload{}
	}
	if _, ok := b.uploads[set]; !ok && len(b.uploads) >= maxUploads {
		for s := range b.uploads {
			delete(b.uploads, s)
			break
		}
	}
	b.uploads[set] = upload{owner: owner, size: size, state: bytes.Clone(state)}
}

func (b *blobs) forget(set blob.ChunkSet) {
	b.mu.Lock()
	delete(b.uploads, set)
	b.mu.Unlock()
}

// uploadQuery is the query of a request about set's upload: its owner,
// and kv.
func (b *blobs) uploadQuery(set blob.ChunkSet, kv ...string) url.Values {
	q := query(kv...)
	if owner := b.owner(set); owner != "" {
		q.Set(wire.UploadOwnerParam, owner)
	}
	return q
}

// BeginUpload starts an upload on the server, owned by p.Owner, which the
// engine remembers (up to maxOwners uploads) to name on the upload's
// later requests. p.State is the server's to choose.
func (b *blobs) BeginUpload(ctx context.Context, p blob.BeginUploadParams) (blob.ChunkSet, error) {
	var up wire.Upload
	q := query("lease", p.Lease.String(), "now", timeText(p.Now), wire.UploadOwnerParam, p.Owner)
	if _, err := b.e.do(ctx, http.MethodPost, "/v1/uploads", &request{query: q}, nil, &up); err != nil {
		return 0, err
	}
	set, ok := blob.ParseUploadID(up.ID)
	if !ok || up.Size != 0 || up.State != nil {
		return 0, fmt.Errorf("remote: begin upload: %w: upload %.40q of %d bytes", errMalformed, up.ID, up.Size)
	}
	b.committed(set, p.Owner, 0, p.State)
	return set, nil
}

// UploadStatus asks the server for the upload's size and hash state, as
// the owner it was begun for through this engine (else ""): an upload
// another process began for another owner is not found. While the
// server's size is the size this engine last committed, the state is the
// one its caller committed with it (the server keeps its own, hashed from
// the same bytes); after another process's append, the server's.
func (b *blobs) UploadStatus(ctx context.Context, set blob.ChunkSet) (blob.UploadStatus, error) {
	var up wire.Upload
	b.mu.Lock()
	last, known := b.uploads[set]
	b.mu.Unlock()
	owner := last.owner
	if _, err := b.e.do(ctx, http.MethodGet, uploadPath(set), &request{query: b.uploadQuery(set)}, nil, &up); err != nil {
		return blob.UploadStatus{}, err
	}
	if up.ID != set.UploadID() || up.Size < 0 || len(up.State) == 0 || len(up.State) > blob.MaxUploadState {
		return blob.UploadStatus{}, fmt.Errorf("remote: upload %s: %w: upload %.40q of %d bytes, a state of %d bytes", set.UploadID(), errMalformed, up.ID, up.Size, len(up.State))
	}
	if known && last.size == up.Size {
		up.State = last.state
	}
	return blob.UploadStatus{Owner: owner, Size: up.Size, State: up.State}, nil
}

// WriteChunk appends p.Data to the upload; p.State is kept for
// UploadStatus, never sent (the server hashes the bytes itself).
func (b *blobs) WriteChunk(ctx context.Context, p blob.WriteChunkParams) error {
	if p.Off < 0 || p.Off > math.MaxInt64-int64(len(p.Data)) {
		return fmt.Errorf("%w: a chunk of %d bytes at offset %d ends outside the largest value", steaderr.ErrInvalidArgument, len(p.Data), p.Off)
	}
	size, err := b.append(ctx, p.Set, p.Off, bytes.NewReader(p.Data), p.Lease, p.Now)
	if err == nil && size != p.Off+int64(len(p.Data)) {
		err = fmt.Errorf("remote: upload %s: %w: %d bytes after %d at %d", p.Set.UploadID(), errMalformed, size, len(p.Data), p.Off)
	}
	if err == nil {
		b.committed(p.Set, b.owner(p.Set), size, p.State)
	}
	return err
}

// append sends body as the append at off to set's upload and returns the
// upload's size the server answers, which must be past off.
func (b *blobs) append(ctx context.Context, set blob.ChunkSet, off int64, body io.Reader, lease time.Duration, now time.Time, kv ...string) (int64, error) {
	var up wire.Upload
	req := &request{body: body, query: b.uploadQuery(set, append([]string{"lease", lease.String(), "now", timeText(now)}, kv...)...)}
	if _, err := b.e.do(ctx, http.MethodPut, uploadPath(set)+"/"+strconv.FormatInt(off, 10), req, nil, &up); err != nil {
		return 0, err
	}
	if up.ID != set.UploadID() || up.Size <= off {
		return 0, fmt.Errorf("remote: upload %s: %w: upload %.40q of %d bytes after an append at %d", set.UploadID(), errMalformed, up.ID, up.Size, off)
	}
	return up.Size, nil
}

func (b *blobs) AbortUpload(ctx context.Context, set blob.ChunkSet) error {
	_, err := b.e.do(ctx, http.MethodDelete, uploadPath(set), &request{query: b.uploadQuery(set)}, nil, nil)
	if err == nil {
		b.forget(set)
	}
	return err
}

func (b *blobs) ReapUploads(ctx context.Context, p blob.ReapUploadsParams) (int, error) {
	var r wire.Reaped
	_, err := b.e.do(ctx, http.MethodPost, "/v1/uploads/reap", &request{query: query("now", timeText(p.Now))}, nil, &r)
	return r.Reaped, err
}

// ReadChunk reads the chunk holding off: its bytes (at most wire.MaxChunk
// of them, whatever the answer's Content-Length says), or the object the
// server keeps it in, with no body; blob.Reader checks that it fits.
func (b *blobs) ReadChunk(ctx context.Context, set blob.ChunkSet, off int64) (blob.Chunk, error) {
	resp, err := b.e.send(ctx, http.MethodGet, chunkPath(set, off), nil, nil)
	if err != nil {
		return blob.Chunk{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return blob.Chunk{}, errorOf(resp)
	}
	h := resp.Header
	start, err := strconv.ParseInt(h.Get(wire.ChunkStartHeader), 10, 64)
	if err != nil || start < 0 || start > off {
		return blob.Chunk{}, fmt.Errorf("remote: chunk %d@%d: %w: chunk start %.40q", set, off, errMalformed, h.Get(wire.ChunkStartHeader))
	}
	if object := h.Get(wire.ChunkObjectHeader); object != "" || h.Get(wire.ChunkSizeHeader) != "" {
		size, err := strconv.ParseInt(h.Get(wire.ChunkSizeHeader), 10, 64)
		n, _ := io.ReadFull(resp.Body, make([]byte, 1))
		if err != nil || size <= 0 || start > math.MaxInt64-size || object == "" || len(object) > wire.MaxObjectName || n != 0 {
			return blob.Chunk{}, fmt.Errorf("remote: chunk %d@%d: %w: object %.40q of size %.40q at %d", set, off, errMalformed, object, h.Get(wire.ChunkSizeHeader), start)
		}
		return blob.Chunk{Start: start, Size: size, Object: object}, nil
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, wire.MaxChunk+1))
	switch {
	case err != nil:
		return blob.Chunk{}, fmt.Errorf("remote: chunk %d@%d: %w", set, off, err)
	case len(data) > wire.MaxChunk:
		return blob.Chunk{}, fmt.Errorf("remote: chunk %d@%d: %w: over %d bytes", set, off, errMalformed, wire.MaxChunk)
	case resp.ContentLength >= 0 && int64(len(data)) != resp.ContentLength:
		return blob.Chunk{}, fmt.Errorf("remote: chunk %d@%d: %w", set, off, io.ErrUnexpectedEOF)
	case len(data) == 0:
		return blob.Chunk{}, fmt.Errorf("remote: chunk %d@%d: %w: an empty chunk", set, off, errMalformed)
	}
	return blob.Chunk{Start: start, Size: int64(len(data)), Data: data}, nil
}

// The paths of an upload and of one chunk of a stored value.
func uploadPath(set blob.ChunkSet) string { return "/v1/uploads/" + set.UploadID() }

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
