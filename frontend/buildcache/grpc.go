package buildcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"github.com/bazelbuild/remote-apis/build/bazel/semver"
	"google.golang.org/genproto/googleapis/bytestream"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/steadkit/stead/server/access"
	"github.com/steadkit/stead/steaderr"
)

// MaxBatch is the max_batch_total_size_bytes the gRPC cache announces: a
// BatchUpdateBlobs or BatchReadBlobs over it is refused whole.
const MaxBatch = 4 << 20

// maxMessage bounds a gRPC message received: a full batch and its
// framing.
const maxMessage = MaxBatch + 1<<20

// GRPC returns a gRPC server answering the Remote Execution API v2's
// Capabilities, ContentAddressableStorage, ActionCache and ByteStream
// services over the cache, on the same entries as its HTTP protocol. When
// authorize is not nil, every call is checked with it: the call's
// "authorization" metadata (or ""), the peer's address and access.Read or
// access.Write (UpdateActionResult, BatchUpdateBlobs and Write write); an
// error from package access is answered Unauthenticated, PermissionDenied
// or ResourceExhausted. The instance name of a request is ignored: every
// instance is the one cache.
func (c *Cache) GRPC(authorize func(header, addr, action string) error, opts ...grpc.ServerOption) *grpc.Server {
	if authorize != nil {
		check := func(ctx context.Context, method string) error {
			header := ""
			if md, ok := metadata.FromIncomingContext(ctx); ok {
				if h := md.Get("authorization"); len(h) > 0 {
					header = h[0]
				}
			}
			addr := ""
			if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
				addr = p.Addr.String()
			}
			action := access.Read
			if grpcWrites[method] {
				action = access.Write
			}
			switch err := authorize(header, addr, action); {
			case err == nil:
				return nil
			case errors.Is(err, access.ErrDenied):
				return status.Error(codes.PermissionDenied, "access denied: this user may not "+action+" the cache")
			case errors.Is(err, access.ErrTooManyAttempts):
				return status.Error(codes.ResourceExhausted, err.Error())
			default:
				return status.Error(codes.Unauthenticated, "missing or wrong credentials: send a bearer token or Basic user:password")
			}
		}
		opts = append(opts,
			grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				if err := check(ctx, info.FullMethod); err != nil {
					return nil, err
				}
				return h(ctx, req)
			}),
			grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				if err := check(ss.Context(), info.FullMethod); err != nil {
					return err
				}
				return h(srv, ss)
			}))
	}
	// Calls run on long-lived workers, whose stacks are already grown to
	// what a store call takes, rather than each on a new goroutine whose
	// stack is copied as it grows; a call finding every worker busy gets
	// a goroutine of its own.
	opts = append([]grpc.ServerOption{grpc.NumStreamWorkers(uint32(streamWorkers()))}, opts...)
	opts = append(opts, grpc.MaxRecvMsgSize(maxMessage))
	s := grpc.NewServer(opts...)
	g := &reapi{c: c}
	repb.RegisterCapabilitiesServer(s, g)
	repb.RegisterContentAddressableStorageServer(s, g)
	repb.RegisterActionCacheServer(s, g)
	bytestream.RegisterByteStreamServer(s, g)
	return s
}

// streamWorkers is how many goroutines serve gRPC calls: enough for the
// calls a busy client keeps in flight.
func streamWorkers() int { return max(16, 4*runtime.GOMAXPROCS(0)) }

// grpcWrites are the methods that write the cache; the others read it.
var grpcWrites = map[string]bool{
	"/build.bazel.remote.execution.v2.ActionCache/UpdateActionResult":             true,
	"/build.bazel.remote.execution.v2.ContentAddressableStorage/BatchUpdateBlobs": true,
	"/google.bytestream.ByteStream/Write":                                         true,
}

// reapi serves the Remote Execution API's cache services over a Cache.
type reapi struct {
	repb.UnimplementedCapabilitiesServer
	repb.UnimplementedContentAddressableStorageServer
	repb.UnimplementedActionCacheServer
	bytestream.UnimplementedByteStreamServer
	c *Cache
}

// grpcErr returns err as a gRPC status.
func (g *reapi) grpcErr(err error) error {
	var incomplete *IncompleteError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &incomplete) && !errors.Is(err, steaderr.ErrNotFound):
		return incompleteStatus(incomplete)
	case status.Code(err) != codes.Unknown:
		return err
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, steaderr.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, steaderr.ErrCorrupt):
		g.c.log.Error("build cache: stored bytes lost or changed", "err", err)
		return status.Error(codes.DataLoss, "the stored entry is lost or damaged")
	case errors.Is(err, steaderr.ErrDigestMismatch), errors.Is(err, steaderr.ErrInvalidArgument),
		errors.Is(err, steaderr.ErrInvalidKey), errors.Is(err, steaderr.ErrTooLarge):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, steaderr.ErrConflict):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, steaderr.ErrLost):
		// An upload ended under the Write (aborted, committed or reaped
		// elsewhere): the client asks its status and starts again.
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, steaderr.ErrUnavailable), errors.Is(err, steaderr.ErrClosed):
		g.c.log.Warn("build cache: store unavailable", "err", err)
		return status.Error(codes.Unavailable, "store unavailable")
	default:
		g.c.log.Error("build cache: internal error", "err", err)
		return status.Error(codes.Internal, "internal error")
	}
}

// incompleteStatus is FAILED_PRECONDITION with a PreconditionFailure
// naming each missing blob, as the API asks of UpdateActionResult.
func incompleteStatus(e *IncompleteError) error {
	pf := &errdetails.PreconditionFailure{}
	for _, d := range e.Missing {
		pf.Violations = append(pf.Violations, &errdetails.PreconditionFailure_Violation{
			Type: "MISSING", Subject: fmt.Sprintf("blobs/%s/%d", d.GetHash(), d.GetSizeBytes()),
		})
	}
	st, err := status.New(codes.FailedPrecondition, e.Error()).WithDetails(pf)
	if err != nil {
		return status.Error(codes.FailedPrecondition, e.Error())
	}
	return st.Err()
}

func itemStatus(err error, g *reapi) *rpcstatus.Status {
	return status.Convert(g.grpcErr(err)).Proto()
}

// checkDigestFunction refuses a request for a digest function other
// than SHA-256.
func checkDigestFunction(req interface {
	GetDigestFunction() repb.DigestFunction_Value
}) error {
	if f := req.GetDigestFunction(); f != repb.DigestFunction_UNKNOWN && f != repb.DigestFunction_SHA256 {
		return status.Errorf(codes.InvalidArgument, "digest function %v: only SHA256 is served", f)
	}
	return nil
}

// GetCapabilities announces a cache of SHA-256 digests, writable, with
// batches up to MaxBatch and zstd in ByteStream; cache_priority is not
// announced, and ignored.
func (g *reapi) GetCapabilities(context.Context, *repb.GetCapabilitiesRequest) (*repb.ServerCapabilities, error) {
	return &repb.ServerCapabilities{
		CacheCapabilities: &repb.CacheCapabilities{
			DigestFunctions:               []repb.DigestFunction_Value{repb.DigestFunction_SHA256},
			ActionCacheUpdateCapabilities: &repb.ActionCacheUpdateCapabilities{UpdateEnabled: true},
			MaxBatchTotalSizeBytes:        MaxBatch,
			MaxCasBlobSizeBytes:           g.c.opts.MaxBlobSize,
			SymlinkAbsolutePathStrategy:   repb.SymlinkAbsolutePathStrategy_ALLOWED,
			// ByteStream's compressed-blobs/zstd/…; batches are identity
			// only.
			SupportedCompressors: []repb.Compressor_Value{repb.Compressor_ZSTD},
		},
		LowApiVersion:  &semver.SemVer{Major: 2},
		HighApiVersion: &semver.SemVer{Major: 2, Minor: 3},
	}, nil
}

// FindMissingBlobs answers the digests that are not cache content, and
// renews the entries of those that are.
func (g *reapi) FindMissingBlobs(ctx context.Context, req *repb.FindMissingBlobsRequest) (*repb.FindMissingBlobsResponse, error) {
	if err := checkDigestFunction(req); err != nil {
		return nil, err
	}
	resp := &repb.FindMissingBlobsResponse{}
	for _, d := range req.GetBlobDigests() {
		k, err := digestKey(d)
		if err != nil {
			return nil, g.grpcErr(err)
		}
		ok, err := g.c.hasContent(ctx, k)
		if err != nil {
			return nil, g.grpcErr(err)
		}
		if !ok {
			resp.MissingBlobDigests = append(resp.MissingBlobDigests, d)
		}
	}
	return resp, nil
}

// BatchUpdateBlobs stores each blob, verified against its digest (size
// and hash), answering each on its own; a batch over MaxBatch is refused
// whole.
func (g *reapi) BatchUpdateBlobs(ctx context.Context, req *repb.BatchUpdateBlobsRequest) (*repb.BatchUpdateBlobsResponse, error) {
	if err := checkDigestFunction(req); err != nil {
		return nil, err
	}
	var total int64
	for _, r := range req.GetRequests() {
		total += int64(len(r.GetData()))
	}
	if total > MaxBatch {
		return nil, status.Errorf(codes.InvalidArgument, "batch of %d bytes, over max_batch_total_size_bytes %d", total, MaxBatch)
	}
	resp := &repb.BatchUpdateBlobsResponse{}
	for _, r := range req.GetRequests() {
		resp.Responses = append(resp.Responses, &repb.BatchUpdateBlobsResponse_Response{
			Digest: r.GetDigest(), Status: itemStatus(g.updateBlob(ctx, r), g),
		})
	}
	return resp, nil
}

func (g *reapi) updateBlob(ctx context.Context, r *repb.BatchUpdateBlobsRequest_Request) error {
	k, err := digestKey(r.GetDigest())
	if err != nil {
		return err
	}
	if r.GetCompressor() != repb.Compressor_IDENTITY {
		return status.Errorf(codes.InvalidArgument, "compressor %v: only IDENTITY is served", r.GetCompressor())
	}
	if int64(len(r.GetData())) != r.GetDigest().GetSizeBytes() {
		return status.Errorf(codes.InvalidArgument, "digest %s says %d bytes, data has %d", r.GetDigest().GetHash(), r.GetDigest().GetSizeBytes(), len(r.GetData()))
	}
	return g.c.putContent(ctx, k, bytes.NewReader(r.GetData()))
}

// BatchReadBlobs answers each blob that is cache content, NOT_FOUND for
// each that is not; a batch whose digests total over MaxBatch is refused
// whole.
func (g *reapi) BatchReadBlobs(ctx context.Context, req *repb.BatchReadBlobsRequest) (*repb.BatchReadBlobsResponse, error) {
	if err := checkDigestFunction(req); err != nil {
		return nil, err
	}
	var total int64
	for _, d := range req.GetDigests() {
		if d.GetSizeBytes() < 0 || d.GetSizeBytes() > MaxBatch {
			return nil, status.Errorf(codes.InvalidArgument, "digest %s of %d bytes, over max_batch_total_size_bytes %d", d.GetHash(), d.GetSizeBytes(), MaxBatch)
		}
		total += d.GetSizeBytes()
	}
	if total > MaxBatch {
		return nil, status.Errorf(codes.InvalidArgument, "batch of %d bytes, over max_batch_total_size_bytes %d", total, MaxBatch)
	}
	resp := &repb.BatchReadBlobsResponse{}
	for _, d := range req.GetDigests() {
		data, err := g.readContent(ctx, d)
		resp.Responses = append(resp.Responses, &repb.BatchReadBlobsResponse_Response{
			Digest: d, Data: data, Status: itemStatus(err, g),
		})
	}
	return resp, nil
}

// readContent reads the cache content of digest d whole; NOT_FOUND also
// when its size is not d's.
func (g *reapi) readContent(ctx context.Context, d *repb.Digest) ([]byte, error) {
	k, err := digestKey(d)
	if err != nil {
		return nil, err
	}
	if k == emptyKey {
		return nil, nil
	}
	rd, err := g.c.openContent(ctx, k)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	if rd.Size() != d.GetSizeBytes() {
		return nil, status.Errorf(codes.NotFound, "%s is stored with %d bytes, not %d", d.GetHash(), rd.Size(), d.GetSizeBytes())
	}
	return readWhole(rd)
}

// treePage bounds the directories, and the bytes, of one GetTree answer.
const (
	treePage      = 1000
	treePageBytes = MaxBatch
)

// GetTree streams the Directory at the root digest and every one below
// it that is cache content, breadth first, each once; a directory that
// is not is left out with what is below it, as the API allows. A root
// that is not cache content is NOT_FOUND. Each answer is a page; the
// stream carries them all, so a page token is refused.
func (g *reapi) GetTree(req *repb.GetTreeRequest, stream grpc.ServerStreamingServer[repb.GetTreeResponse]) error {
	ctx := stream.Context()
	if err := checkDigestFunction(req); err != nil {
		return err
	}
	if req.GetPageToken() != "" {
		return status.Error(codes.InvalidArgument, "page tokens are not issued: the stream carries every page")
	}
	size := int(req.GetPageSize())
	if size <= 0 || size > treePage {
		size = treePage
	}
	queue := []*repb.Digest{req.GetRootDigest()}
	seen := map[string]bool{}
	page := &repb.GetTreeResponse{}
	pageBytes := 0
	for i := 0; i < len(queue); i++ {
		d := queue[i]
		data, err := g.readContent(ctx, d)
		if i == 0 && err != nil {
			return g.grpcErr(err)
		}
		if status.Code(err) == codes.NotFound || errors.Is(err, steaderr.ErrNotFound) {
			continue
		}
		if err != nil {
			return g.grpcErr(err)
		}
		var dir repb.Directory
		if err := proto.Unmarshal(data, &dir); err != nil {
			return status.Errorf(codes.InvalidArgument, "%s is not a Directory: %v", d.GetHash(), err)
		}
		for _, sub := range dir.GetDirectories() {
			if key := sub.GetDigest().GetHash(); !seen[key] {
				seen[key] = true
				queue = append(queue, sub.GetDigest())
			}
		}
		if len(page.Directories) == size || (len(page.Directories) > 0 && pageBytes+len(data) > treePageBytes) {
			if err := stream.Send(page); err != nil {
				return err
			}
			page, pageBytes = &repb.GetTreeResponse{}, 0
		}
		page.Directories = append(page.Directories, &dir)
		pageBytes += len(data)
	}
	return stream.Send(page)
}

// GetActionResult answers the result stored for an action while every
// output it names is stored, renewing it and them; NOT_FOUND otherwise.
// Inlining stdout or stderr is not done (the API lets a server decline).
func (g *reapi) GetActionResult(ctx context.Context, req *repb.GetActionResultRequest) (*repb.ActionResult, error) {
	if err := checkDigestFunction(req); err != nil {
		return nil, err
	}
	k, err := digestKey(req.GetActionDigest())
	if err != nil {
		return nil, g.grpcErr(err)
	}
	_, res, err := g.c.getResult(ctx, hexOf(k))
	if err == nil && res == nil {
		err = status.Errorf(codes.NotFound, "the entry of action %s is not an ActionResult", hexOf(k))
	}
	if err != nil {
		return nil, g.grpcErr(err)
	}
	return res, nil
}

// UpdateActionResult stores a result for an action, replacing any
// before it. Every output it names must be cache content, else
// FAILED_PRECONDITION with a PreconditionFailure naming the missing.
func (g *reapi) UpdateActionResult(ctx context.Context, req *repb.UpdateActionResultRequest) (*repb.ActionResult, error) {
	if err := checkDigestFunction(req); err != nil {
		return nil, err
	}
	k, err := digestKey(req.GetActionDigest())
	if err != nil {
		return nil, g.grpcErr(err)
	}
	res := req.GetActionResult()
	if res == nil {
		return nil, status.Error(codes.InvalidArgument, "no action_result")
	}
	body, err := proto.MarshalOptions{Deterministic: true}.Marshal(res)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "action result: %v", err)
	}
	if len(body) > MaxActionResult {
		return nil, status.Errorf(codes.InvalidArgument, "action result of %d bytes, over %d", len(body), MaxActionResult)
	}
	if err := g.c.putResult(ctx, hexOf(k), body, res); err != nil {
		return nil, g.grpcErr(err)
	}
	return res, nil
}
