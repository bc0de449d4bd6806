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
	"google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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

// parseReadName reads "{instance_name}/blobs/{hash}/{size}".
func parseReadName(name string) (*repb.Digest, error) {
	segs := strings.Split(name, "/")
	n := len(segs)
	if n < 3 || segs[n-3] != "blobs" || !validInstance(segs[:n-3]) {
		return nil, status.Errorf(codes.InvalidArgument, "resource name %.200q: want {instance_name}/blobs/{hash}/{size} (compressed-blobs are not served)", name)
	}
	return parseDigest(segs[n-2], segs[n-1])
}

// parseWriteName reads
// "{instance_name}/uploads/{uuid}/blobs/{hash}/{size}[/{metadata}]" and
// returns the digest and the upload's identity.
func parseWriteName(name string) (*repb.Digest, string, error) {
	segs := strings.Split(name, "/")
	for i := range segs {
		if segs[i] == "uploads" && i+4 < len(segs) && segs[i+1] != "" && segs[i+2] == "blobs" && validInstance(segs[:i]) {
			d, err := parseDigest(segs[i+3], segs[i+4])
			if err != nil {
				return nil, "", err
			}
			return d, strings.Join(segs[:i+5], "/"), nil
		}
	}
	return nil, "", status.Errorf(codes.InvalidArgument, "resource name %.200q: want {instance_name}/uploads/{uuid}/blobs/{hash}/{size} (compressed-blobs are not served)", name)
}

// Read streams cache content from read_offset, at most read_limit bytes
// when it is not 0.
func (g *reapi) Read(req *bytestream.ReadRequest, stream bytestream.ByteStream_ReadServer) error {
	d, err := parseReadName(req.GetResourceName())
	if err != nil {
		return err
	}
	off, limit := req.GetReadOffset(), req.GetReadLimit()
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

// upload is a ByteStream Write in progress: its bytes flow through a
// pipe into the blob store's streaming put, which runs until the upload
// is finished or abandoned.
type upload struct {
	d      *repb.Digest
	active sync.Mutex // held by the stream writing it
	pw     *io.PipeWriter
	// committed is the bytes the put has taken.
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
func (us *uploads) get(c *Cache, id string, d *repb.Digest) (*upload, error) {
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
	u := &upload{d: d, pw: pw, done: make(chan struct{}), cancel: cancel}
	go func() {
		u.err = c.putContent(ctx, k, pr)
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
	d, id, err := parseWriteName(name)
	if err != nil {
		return err
	}
	k, _ := digestKey(d)
	if ok, err := g.c.hasContent(stream.Context(), k); err != nil {
		return g.grpcErr(err)
	} else if ok {
		return stream.SendAndClose(&bytestream.WriteResponse{CommittedSize: d.GetSizeBytes()})
	}
	u, err := g.uploads.get(g.c, id, d)
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
			if u.committed.Load() != d.GetSizeBytes() {
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
			return stream.SendAndClose(&bytestream.WriteResponse{CommittedSize: d.GetSizeBytes()})
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
	if committed+int64(len(req.GetData())) > u.d.GetSizeBytes() {
		return status.Errorf(codes.InvalidArgument, "more than the digest's %d bytes", u.d.GetSizeBytes())
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
	d, id, err := parseWriteName(req.GetResourceName())
	if err != nil {
		return nil, err
	}
	k, _ := digestKey(d)
	if ok, err := g.c.hasContent(ctx, k); err != nil {
		return nil, g.grpcErr(err)
	} else if ok {
		return &bytestream.QueryWriteStatusResponse{CommittedSize: d.GetSizeBytes(), Complete: true}, nil
	}
	u := g.uploads.lookup(id)
	if u == nil {
		return nil, status.Errorf(codes.NotFound, "no upload %.200q in progress", id)
	}
	return &bytestream.QueryWriteStatusResponse{CommittedSize: u.committed.Load()}, nil
}
