// Package bytestier keeps large blob values as objects in a bucket
// (gocloud.dev/blob) for the SQL engines, which keep the rows naming them
// (docs/decisions/0027-bytes-tier.md). It holds the mechanics the engines
// share: object names, streaming writes with a lease renewed as they run,
// ranged reads, bounded deletes, the orphan listing, the bucket's owner
// marker and the doctor's probe. Errors wrap steaderr.ErrNotFound,
// ErrConflict or ErrUnavailable where the bucket's error says so.
package bytestier

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// buckets
	_ "gocloud.dev/blob/memblob"  // mem:// buckets
	"gocloud.dev/gcerrors"

	"github.com/steadkit/stead/steaderr"
)

// Prefix is the prefix of every object a store writes; MarkerName, outside
// it, names the object that records which store owns the bucket.
const (
	Prefix     = "o/"
	MarkerName = "stead-store"
)

// deleteWorkers bounds the deletes one Delete runs at once.
const deleteWorkers = 8

// Tier is one bucket holding a store's large values. It is safe for
// concurrent use.
type Tier struct {
	b *blob.Bucket
	// dir is the root directory of a file:// bucket, whose writes Write
	// makes durable with fsync; "" for every other bucket.
	dir string
	// name is the bucket's URL without credentials or query, for messages.
	name string
	// owned reports that Close closes b.
	owned  bool
	synced sync.Map // directories under dir already fsynced once
}

// Open opens the bucket at rawURL through gocloud.dev's URL openers (the
// schemes registered in this binary: file:// and mem:// always). A
// file:// bucket defaults to no_tmp_dir and metadata=skip, must name an
// existing directory unless create_dir=1 asks for it, and its writes are
// fsynced (file and directories) before Write returns.
func Open(ctx context.Context, rawURL string) (*Tier, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" {
		return nil, fmt.Errorf("%w: bytes tier: bucket URL %.100q: want a URL such as file:///var/lib/stead/objects or s3://bucket", steaderr.ErrInvalidArgument, Redact(rawURL))
	}
	dir := ""
	if u.Scheme == "file" {
		q := u.Query()
		if q.Has("prefix") {
			return nil, fmt.Errorf("%w: bytes tier: file bucket %.100q: prefix= does not apply to a file bucket: name the directory in the path", steaderr.ErrInvalidArgument, Redact(rawURL))
		}
		for name, value := range map[string]string{"no_tmp_dir": "1", "metadata": "skip"} {
			if !q.Has(name) {
				q.Set(name, value)
			}
		}
		// fileblob creates the directory for any non-empty create_dir,
		// "0" too: only the value the docs name is taken.
		if v := q.Get("create_dir"); q.Has("create_dir") && v != "1" && v != "true" {
			return nil, fmt.Errorf("%w: bytes tier: file bucket %.100q: create_dir=%.20q: want create_dir=1, or leave it out", steaderr.ErrInvalidArgument, Redact(rawURL), v)
		}
		u.RawQuery = q.Encode()
		if dir = filepath.FromSlash(u.Path); dir == "" || !filepath.IsAbs(dir) || (u.Host != "" && u.Host != "localhost") {
			return nil, fmt.Errorf("%w: bytes tier: file bucket %.100q: want an absolute directory, file:///path", steaderr.ErrInvalidArgument, Redact(rawURL))
		}
		// A missing directory is a mistyped path, unless the URL asks for
		// it to be made (fileblob's create_dir): a new, empty bucket would
		// answer "no such object" for the store's real one.
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) && !q.Has("create_dir") {
			return nil, fmt.Errorf("%w: bytes tier: file bucket directory %s does not exist (create it, or add create_dir=1 to the bytes tier's URL: bytes=file%%3A%%2F%%2F…%%3Fcreate_dir%%3D1)", steaderr.ErrInvalidArgument, dir)
		}
	}
	b, err := blob.OpenBucket(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("%w: bytes tier: open bucket %s: %v", steaderr.ErrInvalidArgument, Redact(rawURL), err)
	}
	return &Tier{b: b, dir: dir, name: Redact(rawURL), owned: true}, nil
}

// New returns a Tier over b, which the caller keeps and closes.
func New(b *blob.Bucket) *Tier {
	return &Tier{b: b, name: "bucket given by option"}
}

// Redact returns rawURL without its user information and query, which
// may hold credentials.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery, u.ForceQuery = nil, "", false
	return u.String()
}

// String names the bucket, without credentials.
func (t *Tier) String() string { return t.name }

// Close closes the bucket when Open opened it.
func (t *Tier) Close() error {
	if !t.owned {
		return nil
	}
	return t.b.Close()
}

// NewName returns a fresh object name, "o/<2 hex>/<30 hex>", drawn at
// random: unique per upload, so an object is never overwritten.
func NewName() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	h := hex.EncodeToString(b[:])
	return Prefix + h[:2] + "/" + h[2:]
}

// ValidName reports whether name is an object name NewName could return.
func ValidName(name string) bool {
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok || len(rest) != 33 || rest[2] != '/' {
		return false
	}
	for i, c := range []byte(rest) {
		if i == 2 {
			continue
		}
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ErrSource wraps the error a Write's source reader returned, so that the
// caller can tell it from the bucket's.
type ErrSource struct{ Err error }

func (e *ErrSource) Error() string { return e.Err.Error() }
func (e *ErrSource) Unwrap() error { return e.Err }

// sourceReader records the error its reader returns.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

// Write streams r into a new object name, written only if no object of
// that name exists, and returns its size once the bucket's writer closed
// without error (for a file:// bucket: once file and directories are
// fsynced): only then is the object whole and durable. While it writes it
// calls renew every interval (when interval > 0), and stops with renew's
// error if it fails. An error from r comes back as an *ErrSource. On any
// error the object is not written, or is deleted.
func (t *Tier) Write(ctx context.Context, name string, r io.Reader, interval time.Duration, renew func(context.Context) error) (int64, error) {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w, err := t.b.NewWriter(wctx, name, &blob.WriterOptions{IfNotExist: true, ContentType: "application/octet-stream"})
	if err != nil {
		return 0, t.mapErr("write", name, err)
	}
	var renewErr error
	done := make(chan struct{})
	var wg sync.WaitGroup
	if interval > 0 && renew != nil {
		wg.Go(func() {
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
					if err := renew(wctx); err != nil {
						renewErr = err
						cancel(err)
						return
					}
				}
			}
		})
	}
	src := &sourceReader{r: r}
	n, err := io.Copy(w, src)
	close(done)
	wg.Wait()
	switch {
	case src.err != nil:
		err = &ErrSource{src.err}
	case renewErr != nil:
		err = renewErr
	case err != nil:
		err = t.mapErr("write", name, err)
	}
	if err != nil {
		cancel(err) // a cancelled writer's Close discards the object
		_ = w.Close()
		return 0, err
	}
	if err := w.Close(); err != nil {
		if renewErr != nil {
			return 0, renewErr
		}
		return 0, t.mapErr("write", name, err)
	}
	if err := t.sync(name); err != nil {
		t.Delete(context.WithoutCancel(ctx), []string{name})
		return 0, fmt.Errorf("%w: bytes tier: sync %s: %v", steaderr.ErrUnavailable, name, err)
	}
	return n, nil
}

// sync makes a file:// object durable: fileblob renames the written file
// into place without fsync, so the file is fsynced, then its directory,
// and the directories above it up to the bucket's root the first time
// each is seen.
func (t *Tier) sync(name string) error {
	if t.dir == "" {
		return nil
	}
	path := filepath.Join(t.dir, filepath.FromSlash(name))
	if err := fsync(path); err != nil {
		return err
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		_, seen := t.synced.Load(dir)
		if seen && dir != filepath.Dir(path) {
			return nil
		}
		if err := fsync(dir); err != nil {
			return err
		}
		t.synced.Store(dir, true)
		if dir == t.dir || dir == filepath.Dir(dir) {
			return nil
		}
	}
}

func fsync(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// NewRangeReader returns a reader over n bytes of the object from off (n
// < 0: to its end), once it has checked that the object holds size bytes:
// an object of another size is an error wrapping steaderr.ErrCorrupt, as
// it cannot hold the value named for it. An absent object is an error
// wrapping steaderr.ErrNotFound.
func (t *Tier) NewRangeReader(ctx context.Context, name string, size, off, n int64) (io.ReadCloser, error) {
	r, err := t.b.NewRangeReader(ctx, name, off, n, nil)
	if err != nil {
		return nil, t.mapErr("read", name, err)
	}
	if got := r.Size(); got != size {
		r.Close()
		return nil, fmt.Errorf("%w: bytes tier: object %s in %s holds %d bytes, not the value's %d", steaderr.ErrCorrupt, name, t.name, got, size)
	}
	return &reader{t: t, name: name, r: r}, nil
}

// reader maps a bucket reader's errors.
type reader struct {
	t    *Tier
	name string
	r    *blob.Reader
}

func (r *reader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = r.t.mapErr("read", r.name, err)
	}
	return n, err
}

func (r *reader) Close() error { return r.r.Close() }

// Delete deletes the named objects, a few at a time; an object already
// gone is not an error. It returns the first error, after trying every
// name.
func (t *Tier) Delete(ctx context.Context, names []string) error {
	sem := make(chan struct{}, deleteWorkers)
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for _, name := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := t.b.Delete(ctx, name)
			if err != nil && gcerrors.Code(err) != gcerrors.NotFound {
				mu.Lock()
				if first == nil {
					first = t.mapErr("delete", name, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return first
}

// Object is one listed object.
type Object struct {
	// Name is the object's name: for a file still being written (or left
	// by a crash) under a temporary name, Listed is that name and Name the
	// object it becomes.
	Name, Listed string
	ModTime      time.Time
}

// List lists up to limit objects under Prefix from pageToken (nil: the
// first page) and returns the next page's token, nil after the last page.
// Names that are no object of a store's (nor a temporary file of one) are
// left out.
func (t *Tier) List(ctx context.Context, pageToken []byte, limit int) ([]Object, []byte, error) {
	if pageToken == nil {
		pageToken = blob.FirstPageToken
	}
	if t.dir != "" {
		return t.listDir(ctx, pageToken, limit)
	}
	page, next, err := t.b.ListPage(ctx, pageToken, limit, &blob.ListOptions{Prefix: Prefix})
	if err != nil {
		return nil, nil, t.mapErr("list", Prefix, err)
	}
	out := make([]Object, 0, len(page))
	for _, o := range page {
		if o.IsDir {
			continue
		}
		name := baseName(o.Key)
		if name == "" {
			continue
		}
		out = append(out, Object{Name: name, Listed: o.Key, ModTime: o.ModTime})
	}
	if len(next) == 0 {
		next = nil
	}
	return out, next, nil
}

// listDir is List for a file:// bucket, which walks the directory itself:
// fileblob's listing fails when a file it read in a directory is gone
// before its attributes are (a writer renamed its temporary file), and it
// reads every file before the page token again for each page. A page
// token is the last name of the page before, as fileblob's is; a file
// that vanishes during the walk is left out.
func (t *Tier) listDir(ctx context.Context, pageToken []byte, limit int) ([]Object, []byte, error) {
	after := string(pageToken)
	if limit < 1 {
		limit = 1000 // as gocloud.dev's default page
	}
	var out []Object
	var next []byte
	root := strings.TrimSuffix(Prefix, "/")
	err := fs.WalkDir(os.DirFS(t.dir), root, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil && path == root && !errors.Is(err, fs.ErrNotExist):
			return err
		case err != nil:
			return nil // nothing written yet, or gone, or no object of ours
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			if path == root {
				return nil
			}
			// Only o/<2 hex> holds objects; every name under path sorts at
			// or before after.
			if dir := path + "/"; !ValidName(dir+strings.Repeat("0", 30)) || dir < after && !strings.HasPrefix(after, dir) {
				return fs.SkipDir
			}
			return nil
		}
		name := baseName(path)
		if name == "" || path <= after {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		} else if err != nil {
			return err
		}
		if len(out) == limit {
			next = []byte(out[limit-1].Listed)
			return fs.SkipAll
		}
		out = append(out, Object{Name: name, Listed: path, ModTime: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, nil, t.mapErr("list", Prefix, err)
	}
	return out, next, nil
}

// baseName maps a listed name to the object it is: itself, or for a
// fileblob temporary file ("<name>.<hex>.tmp") the name it is renamed to;
// "" for anything else.
func baseName(listed string) string {
	if ValidName(listed) {
		return listed
	}
	if rest, ok := strings.CutSuffix(listed, ".tmp"); ok {
		if i := strings.LastIndexByte(rest, '.'); i > 0 && ValidName(rest[:i]) {
			return rest[:i]
		}
	}
	return ""
}

// Claim makes the bucket this store's: it writes the marker naming id
// when the bucket has none (requireMarker false) and checks a marker
// found names id. A marker naming another store, or none when
// requireMarker is set (the store claimed a bucket before, and this one
// lacks its marker), is an error wrapping steaderr.ErrConflict.
func (t *Tier) Claim(ctx context.Context, id string, requireMarker bool) error {
	got, err := t.b.ReadAll(ctx, MarkerName)
	switch {
	case err == nil:
		if string(got) != id {
			return fmt.Errorf("%w: bytes tier: bucket %s belongs to another store (its %s object names store %.80q, this store is %q): give each store a bucket (or prefix) of its own", steaderr.ErrConflict, t.name, MarkerName, got, id)
		}
		return nil
	case gcerrors.Code(err) != gcerrors.NotFound:
		return t.mapErr("read", MarkerName, err)
	case requireMarker:
		return fmt.Errorf("%w: bytes tier: bucket %s has no %s object, but this store wrote its objects to a bucket that had one: is this the right bucket?", steaderr.ErrConflict, t.name, MarkerName)
	}
	err = t.b.WriteAll(ctx, MarkerName, []byte(id), &blob.WriterOptions{IfNotExist: true, ContentType: "text/plain"})
	if gcerrors.Code(err) == gcerrors.FailedPrecondition {
		return t.Claim(ctx, id, true) // another process wrote one first
	}
	if err != nil {
		return t.mapErr("write", MarkerName, err)
	}
	return t.sync(MarkerName)
}

// Check probes the bucket as the doctor does: it writes, reads back,
// lists and deletes a small object under Prefix.
func (t *Tier) Check(ctx context.Context) error {
	name := NewName()
	want := []byte("stead doctor probe " + name)
	if _, err := t.Write(ctx, name, strings.NewReader(string(want)), 0, nil); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	defer t.Delete(context.WithoutCancel(ctx), []string{name})
	got, err := t.b.ReadAll(ctx, name)
	if err != nil {
		return fmt.Errorf("read: %w", t.mapErr("read", name, err))
	}
	if string(got) != string(want) {
		return fmt.Errorf("%w: read back %d bytes, want the %d written", steaderr.ErrUnavailable, len(got), len(want))
	}
	page, _, err := t.b.ListPage(ctx, blob.FirstPageToken, 1, &blob.ListOptions{Prefix: name})
	if err != nil {
		return fmt.Errorf("list: %w", t.mapErr("list", name, err))
	}
	if len(page) != 1 {
		return fmt.Errorf("%w: list: the probe object written is not listed", steaderr.ErrUnavailable)
	}
	if err := t.b.Delete(ctx, name); err != nil {
		return fmt.Errorf("delete: %w", t.mapErr("delete", name, err))
	}
	return nil
}

// mapErr maps a bucket error to the stead sentinel it means.
func (t *Tier) mapErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("bytes tier: %s %s: %w", op, name, err)
	}
	var sentinel error
	switch gcerrors.Code(err) {
	case gcerrors.NotFound:
		sentinel = steaderr.ErrNotFound
	case gcerrors.FailedPrecondition, gcerrors.AlreadyExists:
		sentinel = steaderr.ErrConflict
	case gcerrors.Canceled:
		return fmt.Errorf("bytes tier: %s %s: %w", op, name, context.Canceled)
	case gcerrors.DeadlineExceeded:
		return fmt.Errorf("bytes tier: %s %s: %w", op, name, context.DeadlineExceeded)
	case gcerrors.InvalidArgument:
		sentinel = steaderr.ErrInvalidArgument
	default:
		sentinel = steaderr.ErrUnavailable
	}
	return fmt.Errorf("%w: bytes tier: %s %s in %s: %v", sentinel, op, name, t.name, err)
}

// SweepPage is one step of the orphan sweep: it lists up to limit objects
// from pageToken, asks orphaned which of those older than grace no row and
// no upload names, and deletes those (with dryRun, only counts them).
// renew, when set, is called once before anything is deleted: the sweep
// lease's last check. It returns how many it listed and deleted (or would
// delete) and the next page token (nil: the listing reached its end).
func (t *Tier) SweepPage(ctx context.Context, pageToken []byte, limit int, grace time.Duration, dryRun bool,
	orphaned func(ctx context.Context, names []string) ([]string, error), renew func(context.Context) error,
) (listed, deleted int64, next []byte, err error) {
	objs, next, err := t.List(ctx, pageToken, limit)
	if err != nil {
		return 0, 0, nil, err
	}
	old := time.Now().Add(-grace)
	var names []string
	for _, o := range objs {
		if o.ModTime.Before(old) {
			names = append(names, o.Name)
		}
	}
	var doomed []string
	if len(names) > 0 {
		orphan, err := orphaned(ctx, names)
		if err != nil {
			return 0, 0, nil, err
		}
		isOrphan := make(map[string]bool, len(orphan))
		for _, n := range orphan {
			isOrphan[n] = true
		}
		for _, o := range objs {
			if isOrphan[o.Name] && o.ModTime.Before(old) {
				doomed = append(doomed, o.Listed)
			}
		}
	}
	if dryRun || len(doomed) == 0 {
		return int64(len(objs)), int64(len(doomed)), next, nil
	}
	if renew != nil {
		if err := renew(ctx); err != nil {
			return 0, 0, nil, err
		}
	}
	if err := t.Delete(ctx, doomed); err != nil {
		return 0, 0, nil, err
	}
	return int64(len(objs)), int64(len(doomed)), next, nil
}
