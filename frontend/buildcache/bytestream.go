package buildcache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/klauspost/compress/zstd"
	"google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/steadkit/stead/steaderr"
)

// readChunk is the most data one ByteStream Read answer carries.
const readChunk = 1 << 20

// Uploads in progress (ByteStream Write) are held in this process's
// memory: one interrupted can be resumed from its committed size while
// the process runs, for uploadIdle after its last write; at most
// maxPendingUploads are in progress at once.
const (
	uploadIdle        = 10 * time.Minute
	maxPendingUploads = 256
)

// parseDigest reads "{hash}/{size}" from segs.
func parseDigest(hash, size string) (*repb.Digest, error) {
	n, err := strconv.ParseInt(size, 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != size {
		return nil, status.Errorf(codes.InvalidArgument, "size %.40q is not a byte count", size)
	}
	d := &repb.Digest{Hash: hash, SizeBytes: n}
	if _, err := digestKey(d); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return d, nil
}

// reserved are the path segments an instance name may not hold.
var reserved = map[string]bool{"blobs": true, "uploads": true, "compressed-blobs": true, "actions": true, "actionResults": true, "operations": true, "capabilities": true}

func validInstance(segs []string) bool {
	for _, s := range segs {
		if reserved[s] {
			return false
		}
	}
	return true
}

// A resource name's blob: its digest and whether its data is
// zstd-compressed (compressed-blobs/zstd/…, the only compressor served).
type resource struct {
	d    *repb.Digest
	zstd bool
}

// parseBlob reads "blobs/{hash}/{size}" or
// "compressed-blobs/zstd/{hash}/{size}" at segs[i:], returning the index
// past it.
func parseBlob(segs []string, i int) (resource, int, error) {
	switch {
	case i+2 < len(segs) && segs[i] == "blobs":
		d, err := parseDigest(segs[i+1], segs[i+2])
		return resource{d: d}, i + 3, err
	case i+3 < len(segs) && segs[i] == "compressed-blobs":
		if segs[i+1] != "zstd" {
			return resource{}, 0, status.Errorf(codes.InvalidArgument, "compressor %.40q: only zstd is served", segs[i+1])
		}
		d, err := parseDigest(segs[i+2], segs[i+3])
		return resource{d: d, zstd: true}, i + 4, err
	}
	return resource{}, 0, errNotBlob
}

var errNotBlob = errors.New("not a blob")

// parseReadName reads "{instance_name}/blobs/{hash}/{size}" or
// "{instance_name}/compressed-blobs/zstd/{hash}/{size}".
func parseReadName(name string) (resource, error) {
	segs := strings.Split(name, "/")
	for i := range segs {
		if segs[i] != "blobs" && segs[i] != "compressed-blobs" {
			continue
		}
		res, end, err := parseBlob(segs, i)
		if errors.Is(err, errNotBlob) || end != len(segs) || !validInstance(segs[:i]) {
			break
		}
		return res, err
	}
	return resource{}, status.Errorf(codes.InvalidArgument, "resource name %.200q: want {instance_name}/blobs/{hash}/{size} or {instance_name}/compressed-blobs/zstd/{hash}/{size}", name)
}

// parseWriteName reads
// "{instance_name}/uploads/{uuid}/blobs/{hash}/{size}[/{metadata}]" (or
// compressed-blobs/zstd/… in place of blobs/…) and returns the blob and
// the upload's identity.
func parseWriteName(name string) (resource, string, error) {
	segs := strings.Split(name, "/")
	for i := range segs {
		if segs[i] == "uploads" && i+2 < len(segs) && segs[i+1] != "" && validInstance(segs[:i]) {
			res, end, err := parseBlob(segs, i+2)
			if errors.Is(err, errNotBlob) {
				break
			}
			if err != nil {
				return resource{}, "", err
			}
			return res, strings.Join(segs[:end], "/"), nil
		}
	}
	return resource{}, "", status.Errorf(codes.InvalidArgument, "resource name %.200q: want {instance_name}/uploads/{uuid}/blobs/{hash}/{size} or …/compressed-blobs/zstd/{hash}/{size}", name)
}

// maxZstdWindow bounds the window a zstd stream sent to the cache may
// ask the decoder for.
const maxZstdWindow = 64 << 20

// zstdBound is the most bytes the zstd compression of size bytes may take
// (ZSTD_compressBound, with room for frame headers): more is refused.
func zstdBound(size int64) int64 { return size + size>>7 + 64<<10 }

// Read streams cache content from read_offset, at most read_limit bytes
// when it is not 0; for compressed-blobs/zstd/… the blob's zstd
// compression, offset and limit counting its bytes.
func (g *reapi) Read(req *bytestream.ReadRequest, stream bytestream.ByteStream_ReadServer) error {
	res, err := parseReadName(req.GetResourceName())
	if err != nil {
		return err
	}
	d := res.d
	off, limit := req.GetReadOffset(), req.GetReadLimit()
	if res.zstd {
		return g.readZstd(stream, d, off, limit)
	}
	switch {
	case off < 0 || off > d.GetSizeBytes():
		return status.Errorf(codes.OutOfRange, "read_offset %d outside the blob's %d bytes", off, d.GetSizeBytes())
	case limit < 0:
		return status.Errorf(codes.InvalidArgument, "read_limit %d", limit)
	}
	k, _ := digestKey(d)
	if k == emptyKey {
		return nil
	}
	rd, err := g.c.openContent(stream.Context(), k)
	if err != nil {
		return g.grpcErr(err)
	}
	defer rd.Close()
	if rd.Size() != d.GetSizeBytes() {
		return status.Errorf(codes.NotFound, "%s is stored with %d bytes, not %d", d.GetHash(), rd.Size(), d.GetSizeBytes())
	}
	if _, err := rd.Seek(off, io.SeekStart); err != nil {
		return g.grpcErr(err)
	}
	left := d.GetSizeBytes() - off
	if limit > 0 {
		left = min(left, limit)
	}
	buf := make([]byte, min(left, readChunk))
	for left > 0 {
		n, err := io.ReadFull(rd, buf[:min(left, readChunk)])
		if err != nil {
			return g.grpcErr(err)
		}
		if err := stream.Send(&bytestream.ReadResponse{Data: buf[:n]}); err != nil {
			return err
		}
		left -= int64(n)
	}
	return nil
}

// readZstd streams the zstd compression of d's content, from off
// compressed bytes, at most limit of them when it is not 0.
func (g *reapi) readZstd(stream bytestream.ByteStream_ReadServer, d *repb.Digest, off, limit int64) error {
	if off < 0 || limit < 0 {
		return status.Errorf(codes.OutOfRange, "read_offset %d, read_limit %d", off, limit)
	}
	k, _ := digestKey(d)
	var src io.Reader = strings.NewReader("")
	if k != emptyKey {
		rd, err := g.c.openContent(stream.Context(), k)
		if err != nil {
			return g.grpcErr(err)
		}
		defer rd.Close()
		if rd.Size() != d.GetSizeBytes() {
			return status.Errorf(codes.NotFound, "%s is stored with %d bytes, not %d", d.GetHash(), rd.Size(), d.GetSizeBytes())
		}
		src = rd
	}
	pr, pw := io.Pipe()
	defer pr.Close()
	go func() {
		enc, err := zstd.NewWriter(pw, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest))
		if err == nil {
			if _, err = io.Copy(enc, src); err == nil {
				err = enc.Close()
			} else {
				enc.Close()
			}
		}
		pw.CloseWithError(err)
	}()
	if n, err := io.CopyN(io.Discard, pr, off); err != nil && !(errors.Is(err, io.EOF) && n == off) {
		if errors.Is(err, io.EOF) {
			return status.Errorf(codes.OutOfRange, "read_offset %d past the compressed blob's %d bytes", off, n)
		}
		return g.grpcErr(err)
	}
	left := int64(-1)
	if limit > 0 {
		left = limit
	}
	buf := make([]byte, readChunk)
	for left != 0 {
		want := int64(readChunk)
		if left > 0 {
			want = min(want, left)
		}
		n, err := io.ReadFull(pr, buf[:want])
		if n > 0 {
			if err := stream.Send(&bytestream.ReadResponse{Data: buf[:n]}); err != nil {
				return err
			}
			if left > 0 {
				left -= int64(n)
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return g.grpcErr(err)
		}
	}
	return nil
}

// upload is a ByteStream Write in progress: its bytes flow through a
// pipe into the blob store's streaming put, which runs until the upload
// is finished or abandoned.
type upload struct {
	d      *repb.Digest
	zstd   bool       // the writes are the blob's zstd compression
	active sync.Mutex // held by the stream writing it
	pw     *io.PipeWriter
	// committed is the bytes the put has taken (compressed ones for
	// zstd).
	committed atomic.Int64
	done      chan struct{}
	err       error // the put's outcome, once done
	cancel    context.CancelFunc
	idle      *time.Timer
}

// uploads are the Writes in progress, by upload name.
type uploads struct {
	mu sync.Mutex
	m  map[string]*upload
}

func newUploads() *uploads { return &uploads{m: map[string]*upload{}} }

// get returns the upload named id, starting it when new.
func (us *uploads) get(c *Cache, id string, res resource) (*upload, error) {
	d := res.d
	us.mu.Lock()
	defer us.mu.Unlock()
	if u, ok := us.m[id]; ok {
		return u, nil
	}
	if len(us.m) >= maxPendingUploads {
		return nil, status.Errorf(codes.ResourceExhausted, "%d uploads in progress: finish or abandon one", len(us.m))
	}
	if d.GetSizeBytes() > c.opts.MaxBlobSize {
		return nil, status.Errorf(codes.InvalidArgument, "blob of %d bytes, over %d", d.GetSizeBytes(), c.opts.MaxBlobSize)
	}
	k, _ := digestKey(d)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	u := &upload{d: d, zstd: res.zstd, pw: pw, done: make(chan struct{}), cancel: cancel}
	go func() {
		var src io.Reader = pr
		if res.zstd {
			dec, err := zstd.NewReader(pr, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow))
			if err != nil {
				u.err = err
				pr.CloseWithError(err)
				close(u.done)
				return
			}
			defer dec.Close()
			src = &exactly{r: &zstdErrors{dec}, left: d.GetSizeBytes()}
		}
		u.err = c.putContent(ctx, k, src)
		pr.CloseWithError(errors.Join(u.err, io.ErrClosedPipe))
		close(u.done)
	}()
	us.m[id] = u
	return u, nil
}

func (us *uploads) lookup(id string) *upload {
	us.mu.Lock()
	defer us.mu.Unlock()
	return us.m[id]
}

// drop ends the upload named id, if it is u, and its put.
func (us *uploads) drop(id string, u *upload, why error) {
	us.mu.Lock()
	if us.m[id] == u {
		delete(us.m, id)
	}
	us.mu.Unlock()
	u.pw.CloseWithError(why)
	u.cancel()
}

// closeAll ends every upload in progress and waits for their puts.
func (us *uploads) closeAll() {
	us.mu.Lock()
	all := us.m
	us.m = map[string]*upload{}
	us.mu.Unlock()
	for _, u := range all {
		u.pw.CloseWithError(errors.New("build cache closed"))
		u.cancel()
		<-u.done
	}
}

// Write stores a blob from a sequence of writes, verified against the
// digest its resource name carries. An interrupted Write can be resumed
// from the committed size QueryWriteStatus answers, by a Write whose
// first write_offset is that size, while this process runs (uploads are
// held in memory). Content already in the cache is answered at once
// with its whole size.
func (g *reapi) Write(stream bytestream.ByteStream_WriteServer) error {
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	name := req.GetResourceName()
	res, id, err := parseWriteName(name)
	if err != nil {
		return err
	}
	d := res.d
	k, _ := digestKey(d)
	if ok, err := g.c.hasContent(stream.Context(), k); err != nil {
		return g.grpcErr(err)
	} else if ok {
		// The API's answer for content already stored: its size, or -1
		// for a compressed upload.
		committed := d.GetSizeBytes()
		if res.zstd {
			committed = -1
		}
		return stream.SendAndClose(&bytestream.WriteResponse{CommittedSize: committed})
	}
	u, err := g.uploads.get(g.c, id, res)
	if err != nil {
		return err
	}
	if !u.active.TryLock() {
		return status.Errorf(codes.Aborted, "upload %.200q is being written by another Write", id)
	}
	defer u.active.Unlock()
	if u.idle != nil {
		u.idle.Stop()
	}
	for {
		if err := g.write(u, name, req); err != nil {
			g.uploads.drop(id, u, err)
			return err
		}
		if req.GetFinishWrite() {
			if !u.zstd && u.committed.Load() != d.GetSizeBytes() {
				err := status.Errorf(codes.InvalidArgument, "finished at %d bytes, the digest says %d", u.committed.Load(), d.GetSizeBytes())
				g.uploads.drop(id, u, err)
				return err
			}
			u.pw.Close()
			<-u.done
			g.uploads.drop(id, u, io.ErrClosedPipe)
			if u.err != nil {
				return g.grpcErr(u.err)
			}
			return stream.SendAndClose(&bytestream.WriteResponse{CommittedSize: u.committed.Load()})
		}
		if req, err = stream.Recv(); err != nil {
			// Interrupted (cancelled, or closed unfinished): kept for a
			// Write that resumes it.
			u.idle = time.AfterFunc(uploadIdle, func() { g.uploads.drop(id, u, errors.New("upload abandoned")) })
			if errors.Is(err, io.EOF) {
				return status.Error(codes.InvalidArgument, "stream closed before finish_write")
			}
			return err
		}
	}
}

// write hands one WriteRequest's data to u's put.
func (g *reapi) write(u *upload, name string, req *bytestream.WriteRequest) error {
	if n := req.GetResourceName(); n != "" && n != name {
		return status.Errorf(codes.InvalidArgument, "resource name %.200q changed within a Write", n)
	}
	committed := u.committed.Load()
	if req.GetWriteOffset() != committed {
		return status.Errorf(codes.InvalidArgument, "write_offset %d, the committed size is %d", req.GetWriteOffset(), committed)
	}
	if max := u.d.GetSizeBytes(); !u.zstd && committed+int64(len(req.GetData())) > max {
		return status.Errorf(codes.InvalidArgument, "more than the digest's %d bytes", max)
	} else if max = zstdBound(max); u.zstd && committed+int64(len(req.GetData())) > max {
		return status.Errorf(codes.InvalidArgument, "more than %d compressed bytes for the digest's %d", max, u.d.GetSizeBytes())
	}
	n, err := u.pw.Write(req.GetData())
	u.committed.Add(int64(n))
	if err != nil {
		<-u.done
		return g.grpcErr(fmt.Errorf("storing the upload: %w", errors.Join(u.err, err)))
	}
	return nil
}

// QueryWriteStatus answers how much of an upload is committed: all of it
// once the content is in the cache, NOT_FOUND for an upload unknown.
func (g *reapi) QueryWriteStatus(ctx context.Context, req *bytestream.QueryWriteStatusRequest) (*bytestream.QueryWriteStatusResponse, error) {
	res, id, err := parseWriteName(req.GetResourceName())
	if err != nil {
		return nil, err
	}
	k, _ := digestKey(res.d)
	if ok, err := g.c.hasContent(ctx, k); err != nil {
		return nil, g.grpcErr(err)
	} else if ok {
		committed := res.d.GetSizeBytes()
		if res.zstd {
			committed = -1
		}
		return &bytestream.QueryWriteStatusResponse{CommittedSize: committed, Complete: true}, nil
	}
	u := g.uploads.lookup(id)
	if u == nil {
		return nil, status.Errorf(codes.NotFound, "no upload %.200q in progress", id)
	}
	return &bytestream.QueryWriteStatusResponse{CommittedSize: u.committed.Load()}, nil
}

// zstdErrors marks a zstd stream that does not decode as bad input.
type zstdErrors struct{ dec *zstd.Decoder }

func (z *zstdErrors) Read(p []byte) (int, error) {
	n, err := z.dec.Read(p)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) && !errors.Is(err, context.Canceled) {
		err = fmt.Errorf("%w: the zstd stream: %v", steaderr.ErrInvalidArgument, err)
	}
	return n, err
}

// exactly reads r, which must hold left bytes: more or fewer is bad input.
type exactly struct {
	r    io.Reader
	left int64
}

func (e *exactly) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if e.left -= int64(n); e.left < 0 {
		return n, fmt.Errorf("%w: the zstd stream holds more than the digest's size", steaderr.ErrInvalidArgument)
	}
	if errors.Is(err, io.EOF) && e.left > 0 {
		return n, fmt.Errorf("%w: the zstd stream holds %d bytes fewer than the digest's size", steaderr.ErrInvalidArgument, e.left)
	}
	return n, err
}
