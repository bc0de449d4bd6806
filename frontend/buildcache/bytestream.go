package buildcache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/klauspost/compress/zstd"
	"google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// readChunk is the most data one ByteStream Read answer carries.
const readChunk = 1 << 20

// A ByteStream Write in progress is a durable upload of the store
// (blob.Upload), named by a ref under uploadPrefix whose annotation
// records the upload (uploadState), so any server over the same database answers
// QueryWriteStatus and resumes it (docs/guides/build-cache.md).
const (
	// uploadPrefix holds the refs naming uploads in progress, by the
	// SHA-256 of the client's upload name; a ref lasts uploadRefTTL, the
	// longest an upload can.
	uploadPrefix = RefPrefix + "uploads/"
	uploadRefTTL = blob.MaxUploadLease
	// uploadOwner owns the cache's uploads: no other owner resumes them.
	uploadOwner = "stead build cache"
	// appendSize is the most of a Write one append takes: without a bytes
	// tier its chunks commit as they fill, on a tier it is one object,
	// committed whole, so a broken stream loses at most this much.
	appendSize = 16 << 20
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
	if len(name) > maxResourceName {
		return resource{}, status.Errorf(codes.InvalidArgument, "resource name of %d bytes, over %d", len(name), maxResourceName)
	}
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
	if len(name) > maxResourceName {
		return resource{}, "", status.Errorf(codes.InvalidArgument, "resource name of %d bytes, over %d", len(name), maxResourceName)
	}
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

// maxResourceName bounds a ByteStream resource name: an instance name,
// an upload's uuid and a digest.
const maxResourceName = 4096

// maxZstdWindow bounds the window a zstd stream sent to the cache may
// ask the decoder for.
const maxZstdWindow = 64 << 20

// zstdBound is the most bytes the zstd compression of size bytes may take
// (ZSTD_compressBound, with room for frame headers): more is refused.
func zstdBound(size int64) int64 { return size + size>>7 + 64<<10 }

// Read streams cache content from read_offset, at most read_limit bytes
// when it is not 0; for compressed-blobs/zstd/… the blob's zstd
// compression, offset and limit counting its bytes. As the ByteStream
// contract says, a negative read_offset, or one past the size, is
// OUT_OF_RANGE, a negative read_limit INVALID_ARGUMENT, whatever is
// stored.
func (g *reapi) Read(req *bytestream.ReadRequest, stream bytestream.ByteStream_ReadServer) error {
	res, err := parseReadName(req.GetResourceName())
	if err != nil {
		return err
	}
	d := res.d
	off, limit := req.GetReadOffset(), req.GetReadLimit()
	switch {
	case off < 0:
		return status.Errorf(codes.OutOfRange, "read_offset %d is negative", off)
	case limit < 0:
		return status.Errorf(codes.InvalidArgument, "read_limit %d is negative", limit)
	case res.zstd:
		return g.readZstd(stream, d, off, limit)
	case off > d.GetSizeBytes():
		return status.Errorf(codes.OutOfRange, "read_offset %d past the blob's %d bytes", off, d.GetSizeBytes())
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
	if left == 0 {
		return nil
	}
	// The stored chunks are sent as they are fetched, not copied first.
	out := &readSender{stream: stream, left: left}
	if _, err := rd.WriteTo(out); err != nil && !errors.Is(err, errReadDone) {
		if out.err != nil {
			return out.err
		}
		return g.grpcErr(err)
	}
	return nil
}

// errReadDone ends a Read's WriteTo once read_limit bytes are sent.
var errReadDone = errors.New("read limit sent")

// readSender sends what is written to it as ByteStream Read answers of
// at most readChunk bytes, up to left bytes, then fails with
// errReadDone.
type readSender struct {
	stream bytestream.ByteStream_ReadServer
	left   int64
	err    error // the stream's, once a Send failed
}

func (s *readSender) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 && s.left > 0 {
		m := int(min(int64(len(p)), readChunk, s.left))
		if err := s.stream.Send(&bytestream.ReadResponse{Data: p[:m]}); err != nil {
			s.err = err
			return n, err
		}
		p, n, s.left = p[m:], n+m, s.left-int64(m)
	}
	if s.left == 0 {
		return n, errReadDone
	}
	return n, nil
}

// readZstd streams the zstd compression of d's content, from off
// compressed bytes (off and limit not negative), at most limit of them
// when it is not 0.
func (g *reapi) readZstd(stream bytestream.ByteStream_ReadServer, d *repb.Digest, off, limit int64) error {
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

// Write stores a blob from a sequence of writes, verified against the
// digest its resource name carries. The writes are appended to a
// durable upload as they arrive, so an interrupted Write is resumed
// through any server over the same database by a Write whose first
// write_offset is the committed size QueryWriteStatus answers, or
// started over by one from 0 (beginUpload; one of the whole blob in a
// single message ends the upload once the blob is stored); another
// offset is INVALID_ARGUMENT and leaves the upload as it was. Data past
// the digest's size, or a finished upload of other content than the
// digest, is INVALID_ARGUMENT and discards the upload. A compressed
// upload holds the compressed bytes, decoded and verified once finished.
// Content already in the cache is answered at once.
func (g *reapi) Write(stream bytestream.ByteStream_WriteServer) error {
	req, err := stream.Recv()
	if err != nil {
		return err
	}
	ctx := stream.Context()
	name := req.GetResourceName()
	res, id, err := parseWriteName(name)
	if err != nil {
		return err
	}
	d := res.d
	k, _ := digestKey(d)
	if ok, err := g.c.hasContent(ctx, k); err != nil {
		return g.grpcErr(err)
	} else if ok {
		return stream.SendAndClose(&bytestream.WriteResponse{CommittedSize: storedSize(res)})
	}
	if d.GetSizeBytes() > g.c.opts.MaxBlobSize {
		return status.Errorf(codes.InvalidArgument, "blob of %d bytes, over %d", d.GetSizeBytes(), g.c.opts.MaxBlobSize)
	}
	max := d.GetSizeBytes()
	if res.zstd {
		max = zstdBound(max)
	}
	if req.GetWriteOffset() == 0 && req.GetFinishWrite() {
		// The whole blob in one message: no upload to resume, and any
		// of the name is started over, so ended once the blob is in.
		src := &writeSource{name: name, max: max, left: max}
		if err := src.take(req); err != nil {
			return err
		}
		if !res.zstd && int64(len(req.GetData())) != d.GetSizeBytes() {
			return status.Errorf(codes.InvalidArgument, "finished at %d bytes, the digest says %d", len(req.GetData()), d.GetSizeBytes())
		}
		if err := g.c.putWritten(ctx, k, res, src); err != nil {
			return g.grpcErr(err)
		}
		g.c.endStartedOver(ctx, id)
		return stream.SendAndClose(&bytestream.WriteResponse{CommittedSize: int64(len(req.GetData()))})
	}
	if req.GetWriteOffset()+int64(len(req.GetData())) > max {
		return status.Errorf(codes.InvalidArgument, "more than the %d bytes the digest allows", max)
	}
	nu, err := g.c.upload(ctx, id, req.GetWriteOffset())
	if err != nil {
		return g.grpcErr(err)
	}
	if nu.state.committing() {
		// All of it is in: what is left is the commit a Write began.
		if req.GetWriteOffset() != nu.state.size || len(req.GetData()) > 0 {
			return status.Errorf(codes.InvalidArgument, "write_offset %d with %d bytes: the upload's %d bytes are all in", req.GetWriteOffset(), len(req.GetData()), nu.state.size)
		}
		if err := g.c.finishUpload(ctx, nu, k, res); err != nil {
			return g.grpcErr(err)
		}
		return stream.SendAndClose(&bytestream.WriteResponse{CommittedSize: nu.state.size})
	}
	up := nu.up
	src := &writeSource{stream: stream, name: name, off: up.Size(), max: max}
	if err := src.take(req); err != nil {
		return err
	}
	for !src.finished || len(src.data) > 0 {
		src.left = appendSize
		if _, err := up.Append(ctx, src); err != nil || src.closed {
			if src.tooMuch {
				g.c.dropUpload(ctx, up, nu.rf)
			}
			if src.err != nil {
				return src.err
			}
			return g.grpcErr(err)
		}
	}
	if size := up.Size(); !res.zstd && size != d.GetSizeBytes() {
		g.c.dropUpload(ctx, up, nu.rf)
		return status.Errorf(codes.InvalidArgument, "finished at %d bytes, the digest says %d", size, d.GetSizeBytes())
	}
	if err := g.c.commitUpload(ctx, nu, k, res); err != nil {
		return g.grpcErr(err)
	}
	return stream.SendAndClose(&bytestream.WriteResponse{CommittedSize: up.Size()})
}

// storedSize is the committed_size the API answers for content stored:
// its size, or -1 for a compressed resource.
func storedSize(res resource) int64 {
	if res.zstd {
		return -1
	}
	return res.d.GetSizeBytes()
}

// QueryWriteStatus answers how much of an upload is committed: all of it
// once the content is in the cache, NOT_FOUND for an upload unknown or
// ended. It writes nothing, as a read: an upload whose commit a Write
// began and did not finish answers all its bytes committed, and a Write
// from there with finish_write finishes it.
func (g *reapi) QueryWriteStatus(ctx context.Context, req *bytestream.QueryWriteStatusRequest) (*bytestream.QueryWriteStatusResponse, error) {
	res, id, err := parseWriteName(req.GetResourceName())
	if err != nil {
		return nil, err
	}
	k, _ := digestKey(res.d)
	if ok, err := g.c.hasContent(ctx, k); err != nil {
		return nil, g.grpcErr(err)
	} else if ok {
		return &bytestream.QueryWriteStatusResponse{CommittedSize: storedSize(res), Complete: true}, nil
	}
	nu, err := g.c.findUpload(ctx, id)
	if err == nil && nu.state.committing() {
		return &bytestream.QueryWriteStatusResponse{CommittedSize: nu.state.size}, nil
	}
	if errors.Is(err, steaderr.ErrNotFound) {
		return nil, status.Errorf(codes.NotFound, "no upload %.200q in progress", id)
	}
	if err != nil {
		return nil, g.grpcErr(err)
	}
	return &bytestream.QueryWriteStatusResponse{CommittedSize: nu.up.Size()}, nil
}

// uploadRef is the name of the ref naming the upload id (a Write's
// resource name up to its blob). The ref is found by that name alone, so
// the name is not stored: its annotation records the upload
// (uploadState), which leaves no room for a name of up to
// maxResourceName bytes, and it keeps uploadMark, one blob for every
// upload.
func uploadRef(id string) string { return uploadPrefix + hexOf(blob.KeyOf([]byte(id))) }

// uploadMark is the content of the blob the refs naming uploads keep; a
// ref names a stored blob.
const uploadMark = "stead build cache: the ref naming a ByteStream upload\n"

// uploadState is what an upload's ref records in its annotation: the
// store's upload id and, once the upload's bytes are all in and their
// commit begun, the key they hash to and their size ("{id} {hex}
// {size}"), so that a commit failing part-way is finished by the next
// Write of the name, the upload ended or not.
type uploadState struct {
	id   string
	sum  blob.Key // zero until the commit begins
	size int64
}

// committing reports whether the upload's commit has begun.
func (s uploadState) committing() bool { return !s.sum.IsZero() }

func (s uploadState) annotation() []byte {
	if !s.committing() {
		return []byte(s.id)
	}
	return fmt.Appendf(nil, "%s %s %d", s.id, hexOf(s.sum), s.size)
}

// parseUploadState reads an annotation of uploadState; one unreadable
// names no upload (ErrNotFound), and a Write from offset 0 replaces it.
func parseUploadState(a []byte) (uploadState, error) {
	f := strings.Split(string(a), " ")
	switch len(f) {
	case 1:
		return uploadState{id: f[0]}, nil
	case 3:
		k, err := blob.ParseKey("sha256:" + f[1])
		n, nerr := strconv.ParseInt(f[2], 10, 64)
		if err == nil && nerr == nil && n >= 0 {
			return uploadState{id: f[0], sum: k, size: n}, nil
		}
	}
	return uploadState{}, fmt.Errorf("%w: an upload's ref recording %.100q", steaderr.ErrNotFound, a)
}

// A namedUpload is an upload found by its client's name: the ref naming
// it, what the ref records, and the upload, nil once it has ended with
// its commit begun.
type namedUpload struct {
	rf    ref.Ref
	state uploadState
	up    *blob.Upload
}

// findUpload returns the upload named id; ErrNotFound when there is none
// (never begun, or ended, or reaped, before its commit began, or its
// committed bytes gone since).
func (c *Cache) findUpload(ctx context.Context, id string) (namedUpload, error) {
	rf, err := c.st.Refs.Get(ctx, uploadRef(id))
	if err != nil {
		return namedUpload{}, err
	}
	nu := namedUpload{rf: rf}
	if nu.state, err = parseUploadState(rf.Annotation); err != nil {
		return nu, fmt.Errorf("upload %.200q: %w", id, err)
	}
	nu.up, err = c.st.Blobs.ResumeUpload(ctx, nu.state.id, blob.UploadOptions{Owner: uploadOwner})
	if errors.Is(err, steaderr.ErrLost) && nu.state.committing() {
		// Ended after its commit began: committed, its bytes the blob
		// sum, unless it was reaped or discarded first, or the blob swept.
		ok, herr := c.st.Blobs.Has(ctx, nu.state.sum)
		if herr != nil || ok {
			return nu, herr
		}
	}
	switch {
	case errors.Is(err, steaderr.ErrLost):
		return nu, fmt.Errorf("upload %.200q: %w: %w", id, steaderr.ErrNotFound, err)
	}
	return nu, err
}

// upload returns the upload named id for a Write from offset off: a new
// one from offset 0 (beginUpload), else the one in progress; a Write
// from another offset with no upload to continue is INVALID_ARGUMENT.
func (c *Cache) upload(ctx context.Context, id string, off int64) (namedUpload, error) {
	if off == 0 {
		return c.beginUpload(ctx, id)
	}
	nu, err := c.findUpload(ctx, id)
	if errors.Is(err, steaderr.ErrNotFound) {
		return nu, status.Errorf(codes.InvalidArgument, "write_offset %d, the committed size is 0 (no upload %.200q in progress)", off, id)
	}
	return nu, err
}

// beginUpload begins an upload and names it id in place of any upload of
// that name, which it then aborts: a Write from offset 0 starts over, as
// the ByteStream contract lets a client, and a Write still appending to
// the upload replaced fails at its next append (ABORTED), never adding to
// the new one. Of Writes starting over at once, the last to name its
// upload keeps it.
func (c *Cache) beginUpload(ctx context.Context, id string) (namedUpload, error) {
	name := uploadRef(id)
	key, err := c.st.Blobs.Put(ctx, strings.NewReader(uploadMark))
	if err != nil {
		return namedUpload{}, err
	}
	for range 3 {
		old, err := c.st.Refs.Get(ctx, name)
		if err != nil && !errors.Is(err, steaderr.ErrNotFound) {
			return namedUpload{}, err
		}
		up, err := c.st.Blobs.BeginUpload(ctx, blob.UploadOptions{Owner: uploadOwner})
		if err != nil {
			return namedUpload{}, err
		}
		state := uploadState{id: up.ID()}
		opts := ref.SetOptions{TTL: uploadRefTTL, Annotation: state.annotation(), IfAbsent: old.Version == 0, IfVersion: old.Version}
		rf, err := c.st.Refs.Set(ctx, name, key, opts)
		if err == nil {
			if old.Version != 0 {
				c.abortReplaced(ctx, old)
			}
			return namedUpload{rf: rf, state: state, up: up}, nil
		}
		_ = up.Abort(context.WithoutCancel(ctx))
		if !errors.Is(err, steaderr.ErrConflict) {
			return namedUpload{}, err
		}
		// Another Write named its upload meanwhile: replace that one.
	}
	return namedUpload{}, status.Errorf(codes.Aborted, "upload %.200q is being begun by other Writes", id)
}

// abortReplaced aborts the upload old named before a Write started it
// over. Failures are logged: the upload is then reaped with its lease.
func (c *Cache) abortReplaced(ctx context.Context, old ref.Ref) {
	ctx = context.WithoutCancel(ctx)
	state, err := parseUploadState(old.Annotation)
	if err != nil {
		return // it names no upload
	}
	up, err := c.st.Blobs.ResumeUpload(ctx, state.id, blob.UploadOptions{Owner: uploadOwner})
	if err == nil {
		err = up.Abort(ctx)
	}
	if err != nil && !errors.Is(err, steaderr.ErrLost) {
		c.log.Warn("build cache: aborting an upload started over", "ref", old.Name, "err", err)
	}
}

// endStartedOver ends the upload named id, if there is one, once a Write
// from offset 0 stored the whole blob in one message: that Write started
// the upload over, as beginUpload does, so its bytes are not held until
// its lease. With no such upload it costs one ref lookup. Failures are
// logged, the blob being stored: an upload left is reaped with its lease.
func (c *Cache) endStartedOver(ctx context.Context, id string) {
	ctx = context.WithoutCancel(ctx)
	old, err := c.st.Refs.Get(ctx, uploadRef(id))
	if err != nil {
		if !errors.Is(err, steaderr.ErrNotFound) {
			c.log.Warn("build cache: looking up an upload started over", "err", err)
		}
		return
	}
	c.abortReplaced(ctx, old)
	c.dropUpload(ctx, nil, old)
}

// dropUpload ends up, when not nil, and deletes rf, the ref naming it
// (unless named again meanwhile). Failures are logged: an upload left is
// reaped with its lease, and its ref lapses.
func (c *Cache) dropUpload(ctx context.Context, up *blob.Upload, rf ref.Ref) {
	ctx = context.WithoutCancel(ctx)
	if up != nil {
		if err := up.Abort(ctx); err != nil {
			c.log.Warn("build cache: aborting an upload", "err", err)
		}
	}
	if err := c.st.Refs.Delete(ctx, rf.Name, rf.Version); err != nil && !errors.Is(err, steaderr.ErrNotFound) && !errors.Is(err, steaderr.ErrConflict) {
		c.log.Warn("build cache: deleting an upload's ref", "ref", rf.Name, "err", err)
	}
}

// commitUpload stores the bytes of nu, all in, as the content k (res's
// blob): as they are, which must hash to k (other bytes discard the
// upload), or, for a compressed upload, decoded into k. Before the
// upload is committed its ref records the commit begun (uploadState), so
// a failure at any step leaves the upload to resume or its commit to
// finish.
func (c *Cache) commitUpload(ctx context.Context, nu namedUpload, k blob.Key, res resource) error {
	sum := nu.up.Sum()
	if !res.zstd && sum != k {
		c.dropUpload(ctx, nu.up, nu.rf)
		return fmt.Errorf("%w: the upload's %d bytes hash to %s, not the digest's", steaderr.ErrDigestMismatch, nu.up.Size(), sum)
	}
	nu.state.sum, nu.state.size = sum, nu.up.Size()
	rf, err := c.st.Refs.Set(ctx, nu.rf.Name, nu.rf.Key, ref.SetOptions{TTL: uploadRefTTL, Annotation: nu.state.annotation(), IfVersion: nu.rf.Version})
	if err != nil {
		return err
	}
	nu.rf = rf
	return c.finishUpload(ctx, nu, k, res)
}

// finishUpload finishes the commit of nu that commitUpload began: it
// commits the upload, unless it has ended, keeps its bytes as the
// content k (decoding a compressed upload), and deletes nu's ref. Bytes
// that are not k's, or are gone (the upload ended uncommitted, or its
// blob swept), end the ref too; any other failure leaves it, for the next
// Write of the name to finish.
func (c *Cache) finishUpload(ctx context.Context, nu namedUpload, k blob.Key, res resource) error {
	err := c.keepUpload(ctx, nu, k, res)
	if err == nil || errors.Is(err, steaderr.ErrNotFound) || errors.Is(err, steaderr.ErrDigestMismatch) ||
		errors.Is(err, steaderr.ErrInvalidArgument) || errors.Is(err, steaderr.ErrTooLarge) {
		c.dropUpload(ctx, nil, nu.rf)
	}
	return err
}

// keepUpload is finishUpload's work but for the ref.
func (c *Cache) keepUpload(ctx context.Context, nu namedUpload, k blob.Key, res resource) error {
	if nu.up != nil {
		_, err := nu.up.Commit(ctx, blob.CommitOptions{Expect: nu.state.sum})
		if errors.Is(err, steaderr.ErrDigestMismatch) {
			_ = nu.up.Abort(context.WithoutCancel(ctx)) // appended to since its commit began
		}
		if err != nil && !errors.Is(err, steaderr.ErrLost) {
			return err
		}
	}
	if !res.zstd {
		return c.keepContent(ctx, k)
	}
	// The compressed bytes are a blob of their own, pinned for a while
	// and kept by nothing once decoded.
	rd, err := c.st.Blobs.Get(ctx, nu.state.sum)
	if err != nil {
		return err
	}
	defer rd.Close()
	return c.putWritten(ctx, k, res, rd)
}

// putWritten stores r, res's data as written (zstd-compressed for a
// compressed resource), as the content k.
func (c *Cache) putWritten(ctx context.Context, k blob.Key, res resource, r io.Reader) error {
	if !res.zstd {
		return c.putContent(ctx, k, r)
	}
	dec, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow))
	if err != nil {
		return err
	}
	defer dec.Close()
	return c.putContent(ctx, k, &exactly{r: &zstdErrors{dec}, left: res.d.GetSizeBytes()})
}

// writeSource reads a Write's data from its stream, message by message,
// each of which must continue where the last ended, at most left bytes
// (one append) at a time and max in all. Its end is finish_write, or the
// stream closed (closed) or failed (err).
type writeSource struct {
	stream   bytestream.ByteStream_WriteServer
	name     string
	data     []byte // the last message's data not yet read
	off      int64  // the upload's offset past data
	max      int64
	left     int64
	finished bool  // finish_write has been received
	closed   bool  // the stream was closed before finish_write
	tooMuch  bool  // the data is past max
	err      error // the stream's failure or the protocol's refusal
}

func (s *writeSource) Read(p []byte) (int, error) {
	for len(s.data) == 0 {
		switch {
		case s.err != nil:
			return 0, s.err
		case s.finished || s.closed || s.left == 0:
			return 0, io.EOF
		}
		req, err := s.stream.Recv()
		if errors.Is(err, io.EOF) {
			// What arrived is committed; the Write answers the error.
			s.closed = true
			s.err = status.Error(codes.InvalidArgument, "stream closed before finish_write")
			return 0, io.EOF
		}
		if err == nil {
			err = s.take(req)
		}
		if err != nil {
			s.err = err
			return 0, err
		}
	}
	n := copy(p[:min(int64(len(p)), s.left)], s.data)
	s.data = s.data[n:]
	s.left -= int64(n)
	return n, nil
}

// take checks req and makes its data the next to read.
func (s *writeSource) take(req *bytestream.WriteRequest) error {
	if n := req.GetResourceName(); n != "" && n != s.name {
		return status.Errorf(codes.InvalidArgument, "resource name %.200q changed within a Write", n)
	}
	if req.GetWriteOffset() != s.off {
		return status.Errorf(codes.InvalidArgument, "write_offset %d: the upload continues at %d", req.GetWriteOffset(), s.off)
	}
	if s.off+int64(len(req.GetData())) > s.max {
		s.tooMuch = true
		return status.Errorf(codes.InvalidArgument, "more than the %d bytes the digest allows", s.max)
	}
	s.data, s.finished = req.GetData(), req.GetFinishWrite()
	s.off += int64(len(s.data))
	return nil
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
