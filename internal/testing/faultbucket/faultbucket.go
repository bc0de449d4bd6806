// Package faultbucket wraps a real bucket (gocloud.dev/blob) in a
// driver.Bucket whose calls fail when a test says so, for the bytes tier's
// fault tests: a write that fails midway, a bucket unreachable during a
// sweep.
package faultbucket

import (
	"context"
	"errors"
	"io"

	"gocloud.dev/blob"
	"gocloud.dev/blob/driver"
	"gocloud.dev/gcerrors"
)

// The operations a fail function is asked about.
const (
	OpList   = "list"
	OpRead   = "read"
	OpWrite  = "write" // each Write call of an object's writer
	OpClose  = "close" // an object writer's Close
	OpDelete = "delete"
	OpAttrs  = "attributes"
)

// ErrInjected is the error a failed call returns unless fail gives one.
var ErrInjected = errors.New("faultbucket: injected failure")

// New returns a bucket over inner whose every call first asks fail(op,
// key): a non-nil error is returned in place of the call. inner is not
// closed with it.
func New(inner *blob.Bucket, fail func(op, key string) error) *blob.Bucket {
	return blob.NewBucket(&bucket{inner: inner, fail: fail})
}

type bucket struct {
	inner *blob.Bucket
	fail  func(op, key string) error
}

// injected wraps an injected failure so that ErrorCode answers Unknown
// (an unreachable bucket) while errors.Is still finds it.
type injected struct{ err error }

func (e injected) Error() string { return e.err.Error() }
func (e injected) Unwrap() error { return e.err }

func (b *bucket) check(op, key string) error {
	if err := b.fail(op, key); err != nil {
		return injected{err}
	}
	return nil
}

func (b *bucket) ErrorCode(err error) gcerrors.ErrorCode {
	var inj injected
	if errors.As(err, &inj) {
		return gcerrors.Unknown
	}
	return gcerrors.Code(err)
}

func (b *bucket) As(any) bool             { return false }
func (b *bucket) ErrorAs(error, any) bool { return false }

func (b *bucket) Attributes(ctx context.Context, key string) (*driver.Attributes, error) {
	if err := b.check(OpAttrs, key); err != nil {
		return nil, err
	}
	a, err := b.inner.Attributes(ctx, key)
	if err != nil {
		return nil, err
	}
	return &driver.Attributes{ContentType: a.ContentType, Metadata: a.Metadata, ModTime: a.ModTime, Size: a.Size, MD5: a.MD5, ETag: a.ETag}, nil
}

func (b *bucket) ListPaged(ctx context.Context, opts *driver.ListOptions) (*driver.ListPage, error) {
	if err := b.check(OpList, opts.Prefix); err != nil {
		return nil, err
	}
	token := opts.PageToken
	if len(token) == 0 {
		token = blob.FirstPageToken
	}
	objs, next, err := b.inner.ListPage(ctx, token, opts.PageSize, &blob.ListOptions{Prefix: opts.Prefix, Delimiter: opts.Delimiter})
	if err != nil {
		return nil, err
	}
	page := &driver.ListPage{NextPageToken: next}
	for _, o := range objs {
		page.Objects = append(page.Objects, &driver.ListObject{Key: o.Key, ModTime: o.ModTime, Size: o.Size, MD5: o.MD5, IsDir: o.IsDir})
	}
	return page, nil
}

func (b *bucket) NewRangeReader(ctx context.Context, key string, offset, length int64, _ *driver.ReaderOptions) (driver.Reader, error) {
	if err := b.check(OpRead, key); err != nil {
		return nil, err
	}
	r, err := b.inner.NewRangeReader(ctx, key, offset, length, nil)
	if err != nil {
		return nil, err
	}
	return &reader{r: r}, nil
}

type reader struct{ r *blob.Reader }

func (r *reader) Read(p []byte) (int, error) { return r.r.Read(p) }
func (r *reader) Close() error               { return r.r.Close() }
func (r *reader) As(any) bool                { return false }
func (r *reader) Attributes() *driver.ReaderAttributes {
	return &driver.ReaderAttributes{ContentType: r.r.ContentType(), ModTime: r.r.ModTime(), Size: r.r.Size()}
}

func (b *bucket) NewTypedWriter(ctx context.Context, key, contentType string, opts *driver.WriterOptions) (driver.Writer, error) {
	if err := b.check(OpWrite, key); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	w, err := b.inner.NewWriter(wctx, key, &blob.WriterOptions{ContentType: contentType, IfNotExist: opts.IfNotExist, Metadata: opts.Metadata})
	if err != nil {
		cancel()
		return nil, err
	}
	return &writer{b: b, key: key, w: w, ctx: ctx, cancel: cancel}, nil
}

// writer passes writes to the inner bucket's writer; a failed write or
// close cancels it, so the inner bucket discards the object, as a real
// bucket does with an aborted upload.
type writer struct {
	b      *bucket
	key    string
	w      *blob.Writer
	ctx    context.Context
	cancel context.CancelFunc
	failed bool
}

func (w *writer) Write(p []byte) (int, error) {
	if err := w.b.check(OpWrite, w.key); err != nil {
		w.failed = true
		return 0, err
	}
	return w.w.Write(p)
}

func (w *writer) Close() error {
	defer w.cancel()
	if err := w.ctx.Err(); err != nil || w.failed {
		w.cancel()
		_ = w.w.Close()
		if err == nil {
			err = ErrInjected
		}
		return err
	}
	if err := w.b.check(OpClose, w.key); err != nil {
		w.cancel()
		_ = w.w.Close()
		return err
	}
	return w.w.Close()
}

func (b *bucket) Copy(ctx context.Context, dst, src string, _ *driver.CopyOptions) error {
	if err := b.check(OpWrite, dst); err != nil {
		return err
	}
	return b.inner.Copy(ctx, dst, src, nil)
}

func (b *bucket) Delete(ctx context.Context, key string, _ *driver.DeleteOptions) error {
	if err := b.check(OpDelete, key); err != nil {
		return err
	}
	return b.inner.Delete(ctx, key)
}

func (b *bucket) SignedURL(context.Context, string, *driver.SignedURLOptions) (string, error) {
	return "", errors.ErrUnsupported
}

func (b *bucket) Close() error { return nil }

var _ io.Closer = (*writer)(nil)
