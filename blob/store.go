// Package blob holds the portable blob layer: content-addressed keys,
// validation, hashing and size policy over a Backend's mechanics.
package blob

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"iter"
	"slices"
	"sync"
	"time"

	"github.com/steadkit/stead/steaderr"
)

const (
	// InlineLimit is the largest value stored inline, in its blob row. See
	// docs/decisions/0003-inline-limit.md for how it was chosen.
	InlineLimit = 256 << 10
	// DefaultMaxSize is the default for Options.MaxSize: 4 GiB.
	DefaultMaxSize = 4 << 30
	// DefaultPageSize is the default for Options.PageSize.
	DefaultPageSize = 1000
	// DefaultChunkSize is the default for Options.ChunkSize. See
	// docs/decisions/0011-large-blobs.md for how it was chosen.
	DefaultChunkSize = 1 << 20
	// DefaultUploadLease is the default for Options.UploadLease.
	DefaultUploadLease = 5 * time.Minute
	// MaxUploadLease bounds Options.UploadLease; a longer one is cut to it.
	MaxUploadLease = 24 * time.Hour
	// abortTimeout bounds the clean-up of a failed put, which runs even
	// when the put's context is done.
	abortTimeout = 30 * time.Second
)

// Options configures a Store.
type Options struct {
	// MaxSize is the largest value Put accepts, in bytes; a larger value
	// fails with ErrTooLarge and stores nothing. Defaults to DefaultMaxSize.
	MaxSize int64
	// VerifyReads makes Get re-hash every value it returns and fail with
	// ErrCorrupt (an ErrDigestMismatch) when the stored bytes no longer
	// match their key. Defaults to false.
	VerifyReads bool
	// PageSize is how many blobs All reads from the engine at a time (one
	// statement each). Defaults to DefaultPageSize.
	PageSize int
	// InlineLimit is the largest value stored whole in its blob row; larger
	// values are stored in chunks of ChunkSize bytes and stream in both
	// directions. Defaults to InlineLimit; tests set it tiny so that every
	// value takes the chunked path.
	InlineLimit int
	// ChunkSize is the size of the chunks of a value over InlineLimit, and
	// so the memory a streaming put or get holds. Defaults to
	// DefaultChunkSize.
	ChunkSize int
	// UploadLease is how long a chunked put may go without writing a chunk
	// before its staged chunks may be reaped (ReapUploads), for instance
	// after its process was killed, in whole microseconds, at most
	// MaxUploadLease. Defaults to DefaultUploadLease.
	UploadLease time.Duration
	// Owner owns the store's pins: the stead store's instance id. Defaults
	// to a random id.
	Owner string
	// PinTTL is how long a put's pin lasts, and a Pin guard's between
	// renewals (every PinTTL/3). Defaults to DefaultPinTTL.
	PinTTL time.Duration
	// Now is the clock pins are measured against, for tests that move
	// time without sleeping. Defaults to nil: the engine's clock (the
	// database's now() on PostgreSQL) for stored expiries, the system
	// clock's monotonic reading for the deadlines kept in process.
	Now func() time.Time
}

// DefaultPinTTL is the default for Options.PinTTL.
const DefaultPinTTL = 60 * time.Second

// Store is the blob capability of a stead store. It is safe for concurrent
// use.
type Store struct {
	eng       Backend
	maxSize   int64
	verify    bool
	pageSize  int
	inline    int64
	chunkSize int
	lease     time.Duration
	pins      *pinTable
}

// NewStore returns a Store over eng. A non-positive option means its
// default; a PinTTL is rounded down to whole microseconds.
func NewStore(eng Backend, opts Options) *Store {
	if opts.MaxSize <= 0 {
		opts.MaxSize = DefaultMaxSize
	}
	if opts.PageSize <= 0 {
		opts.PageSize = DefaultPageSize
	}
	if opts.InlineLimit <= 0 {
		opts.InlineLimit = InlineLimit
	}
	if opts.ChunkSize <= 0 {
		opts.ChunkSize = DefaultChunkSize
	}
	if opts.UploadLease = min(opts.UploadLease.Truncate(time.Microsecond), MaxUploadLease); opts.UploadLease <= 0 {
		opts.UploadLease = DefaultUploadLease
	}
	if opts.PinTTL = opts.PinTTL.Truncate(time.Microsecond); opts.PinTTL <= 0 {
		opts.PinTTL = DefaultPinTTL
	}
	if opts.Owner == "" {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
		opts.Owner = hex.EncodeToString(b[:])
	}
	s := &Store{
		eng: eng, maxSize: opts.MaxSize, verify: opts.VerifyReads, pageSize: opts.PageSize,
		inline: int64(opts.InlineLimit), chunkSize: opts.ChunkSize, lease: opts.UploadLease,
	}
	s.pins = &pinTable{owner: opts.Owner, ttl: opts.PinTTL, now: opts.Now, held: map[Key]*held{}, closed: make(chan struct{})}
	return s
}

// Close stops the renewals of every Pin guard, which are then lost. The
// engine is closed by its owner (stead.Store.Close). Close is idempotent.
func (s *Store) Close() {
	s.pins.closeOnce.Do(func() { close(s.pins.closed) })
}

// Put stores the content of r and returns its key, pinned by this store's
// owner: no garbage-collection sweep or Delete removes it until at least
// half of Options.PinTTL after the put was sent. It streams: a value over
// the inline limit is hashed and written chunk by chunk, so memory stays
// bounded by the chunk size, and becomes visible only once it is whole.
// Storing content that is already stored succeeds and renews the pin for a
// whole PinTTL, unless this store's pin on the key has more than half its
// TTL left: then the put writes nothing and that pin protects it. To keep a
// key protected longer, set a ref to it, reference it from another blob
// (PutOptions.Children), or hold a Pin. An error means the put may or may
// not have taken effect (a statement cancelled while it waits can still
// commit), never partially: the key is then either absent or stored whole,
// and retrying is safe. Errors found before anything is published (invalid
// input, a digest mismatch, a failing reader, a context ended before the
// write) store nothing, and discard any chunks staged.
func (s *Store) Put(ctx context.Context, r io.Reader) (Key, error) {
	res, err := s.PutWith(ctx, r, PutOptions{})
	return res.Key, err
}

// PutExpect stores the content of r under key after checking that key is
// its digest; on a mismatch it returns an error wrapping ErrDigestMismatch
// and stores nothing.
func (s *Store) PutExpect(ctx context.Context, key Key, r io.Reader) error {
	if key.IsZero() {
		return fmt.Errorf("blob put: %w: zero key", steaderr.ErrInvalidKey)
	}
	_, err := s.PutWith(ctx, r, PutOptions{Expect: key})
	return err
}

// PutOptions are the options of PutWith.
type PutOptions struct {
	// Expect, when not zero, is the key the content must hash to (else
	// ErrDigestMismatch, nothing stored).
	Expect Key
	// Children are the blobs the content references (a manifest's layers,
	// a tree's files), at most MaxChildren: while the put's blob is stored
	// they are kept, with no pin or ref of their own, and once it is
	// deleted they are left to the collector. Each must be stored when
	// the put publishes its blob (else ErrNotFound naming the missing,
	// and nothing is stored): put children before their parent. Stored
	// content keeps the children of the put that stored it: a re-put may
	// declare those or fewer, and one declaring another is refused
	// (steaderr.ErrChildrenFixed, an ErrConflict), nothing changed.
	Children []Key
}

// PutResult is what a put stored.
type PutResult struct {
	Key Key
	// Created is true when this put stored the blob, false when it was
	// stored already: of concurrent puts of one key one is told true
	// (Backend.Put says when none is).
	Created bool
}

// PutWith is Put with options: a claimed digest, the blobs the content
// references. It also tells whether the put stored the blob.
func (s *Store) PutWith(ctx context.Context, r io.Reader, opts PutOptions) (PutResult, error) {
	return s.putWith(ctx, r, opts, nil)
}

// putWith is PutWith, an inline value sent through via when not nil
// (PutVia).
func (s *Store) putWith(ctx context.Context, r io.Reader, opts PutOptions, via func(context.Context, PutParams) (bool, error)) (PutResult, error) {
	children, err := checkChildren(opts.Children)
	if err == nil {
		var res PutResult
		if res, err = s.put(ctx, opts.Expect, children, r, via); err == nil {
			return res, nil
		}
	}
	if !opts.Expect.IsZero() {
		return PutResult{}, fmt.Errorf("blob put %s: %w", opts.Expect, err)
	}
	return PutResult{}, fmt.Errorf("blob put: %w", err)
}

// checkChildren returns children sorted and distinct, or an error for a
// zero key or too many.
func checkChildren(children []Key) ([]Key, error) {
	if len(children) == 0 {
		return nil, nil
	}
	if len(children) > MaxChildren {
		return nil, fmt.Errorf("%w: %d children, at most %d", steaderr.ErrInvalidArgument, len(children), MaxChildren)
	}
	out := slices.Clone(children)
	slices.SortFunc(out, Key.Compare)
	out = slices.Compact(out)
	if out[0].IsZero() {
		return nil, fmt.Errorf("%w: zero child key", steaderr.ErrInvalidKey)
	}
	return out, nil
}

// withChildren returns p with children, refusing a blob that names itself.
func withChildren(p PutParams, children []Key) (PutParams, error) {
	if _, self := slices.BinarySearchFunc(children, p.Key, Key.Compare); self {
		return p, fmt.Errorf("%w: %s names itself as a child", steaderr.ErrInvalidArgument, p.Key)
	}
	p.Children = children
	return p, nil
}

// CheckChildren returns children as PutParams.Children holds them for a
// put of key (sorted, distinct), or an error for more than MaxChildren, a
// zero key, or key itself among them: the checks Store makes before an
// engine's Put, for a caller of the engine.
func CheckChildren(key Key, children []Key) ([]Key, error) {
	children, err := checkChildren(children)
	if err != nil {
		return nil, err
	}
	p, err := withChildren(PutParams{Key: key}, children)
	return p.Children, err
}

func (s *Store) put(ctx context.Context, want Key, children []Key, r io.Reader, via func(context.Context, PutParams) (bool, error)) (PutResult, error) {
	if err := ctx.Err(); err != nil {
		return PutResult{}, err
	}
	pb := putBufs.Get().(*putBuf)
	defer putBufs.Put(pb)
	value, err := readAtMost(r, pb.buf[:0], min(s.maxSize, s.inline))
	pb.buf = value[:0]
	switch {
	case errors.Is(err, errOverLimit) && int64(len(value)) > s.maxSize:
		return PutResult{}, fmt.Errorf("%w: more than %d bytes", steaderr.ErrTooLarge, s.maxSize)
	case errors.Is(err, errOverLimit):
		return s.putUpload(ctx, want, children, io.MultiReader(bytes.NewReader(value), r))
	case err != nil:
		return PutResult{}, fmt.Errorf("read content: %w", err)
	}
	// Reading may take long; a context cancelled meanwhile stores nothing.
	if err := ctx.Err(); err != nil {
		return PutResult{}, err
	}
	key := Key{valid: true, digest: sha256.Sum256(value)}
	if !want.IsZero() && key != want {
		return PutResult{}, fmt.Errorf("%w: content hashes to %s", steaderr.ErrDigestMismatch, key)
	}
	p, err := withChildren(PutParams{Key: key, Value: value}, children)
	if err != nil {
		return PutResult{}, err
	}
	created, _, err := s.pins.put(ctx, s.eng, p, via)
	if err != nil {
		return PutResult{}, err
	}
	return PutResult{Key: key, Created: created}, nil
}

// putUpload streams r's content into an upload and commits it, pinned,
// once whole and hashed. The upload is aborted after a failure, even when
// ctx is done; if the abort fails too, the upload's lease lapses and
// ReapUploads discards it.
func (s *Store) putUpload(ctx context.Context, want Key, children []Key, r io.Reader) (res PutResult, err error) {
	u, err := s.BeginUpload(ctx, UploadOptions{})
	if err != nil {
		return PutResult{}, err
	}
	defer func() {
		if err != nil {
			s.abortUpload(ctx, u.set, &err)
		}
	}()
	if _, err := u.Append(ctx, r); err != nil {
		return PutResult{}, err
	}
	key, err := u.Commit(ctx, CommitOptions{Expect: want, Children: children})
	if err != nil {
		return PutResult{}, err
	}
	return PutResult{Key: key, Created: u.Created()}, nil
}

// abortUpload aborts the upload set, even when ctx is done, and tells
// its failure in *err.
func (s *Store) abortUpload(ctx context.Context, set ChunkSet, err *error) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	if aerr := s.eng.AbortUpload(actx, set); aerr != nil && *err != nil {
		// The put's error is the one to act on: the abort's is told,
		// not wrapped.
		*err = fmt.Errorf("%w; discarding the staged upload failed too (the upload lease reaps it): %v", *err, aerr)
	} else if aerr != nil {
		*err = fmt.Errorf("discard the staged upload (the upload lease reaps it): %w", aerr)
	}
}

// chunk is one chunk read from a put's source, or the error that ended
// the reading; release hands its buffer back to the reader.
type chunk struct {
	data    []byte
	state   []byte // the hash's state after data, when readChunks hashes
	err     error
	release func()
}

// readChunks reads r in chunks of s.chunkSize bytes on a goroutine of its
// own, one chunk ahead of the caller, and sends them in order; the channel
// closes after the last chunk or after a chunk carrying an error (a read
// error, or ErrTooLarge past limit bytes, the room MaxSize leaves: at most
// limit+1 bytes are read).
// With h not nil, each chunk is written to h on the reading goroutine and
// carries h's state after it, so hashing runs beside the caller's use of
// the chunk before; h is then the reading goroutine's until stop returns,
// and may hold one chunk more than the caller received.
// stop ends the reading and waits for it, so r is never read after stop
// returns; a read already blocked in r is waited for.
func (s *Store) readChunks(r io.Reader, limit int64, h hash.Hash) (<-chan chunk, func()) {
	out := make(chan chunk)
	free := make(chan []byte, 2)
	free <- make([]byte, s.chunkSize)
	free <- make([]byte, s.chunkSize)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(out)
		var size int64
		for {
			var buf []byte
			select {
			case buf = <-free:
			case <-done:
				return
			}
			// Read at most one byte past the limit, so an endless source
			// is refused after limit+1 bytes.
			n, err := io.ReadFull(r, buf[:min(int64(len(buf)), limit-size+1)])
			size += int64(n)
			c := chunk{data: buf[:n], release: func() { free <- buf }}
			switch {
			case err != nil && err != io.EOF && err != io.ErrUnexpectedEOF:
				c = chunk{err: fmt.Errorf("read content: %w", err)}
			case size > limit:
				c = chunk{err: fmt.Errorf("%w: more than %d bytes", steaderr.ErrTooLarge, s.maxSize)}
			case n == 0:
				return
			case h != nil:
				h.Write(c.data)
				var serr error
				if c.state, serr = h.(encoding.BinaryMarshaler).MarshalBinary(); serr != nil {
					c = chunk{err: fmt.Errorf("hash state: %w", serr)}
				}
			}
			select {
			case out <- c:
			case <-done:
				return
			}
			if err != nil || c.err != nil {
				return
			}
		}
	})
	return out, func() { close(done); wg.Wait() }
}

// putBuf is the buffer a put reads an inline value into; a value past
// the inline limit is hashed by its Upload.
type putBuf struct{ buf []byte }

var putBufs = sync.Pool{New: func() any { return &putBuf{buf: make([]byte, 0, 64<<10)} }}

var errOverLimit = errors.New("over limit")

// readAtMost reads r to EOF into buf, growing it up to limit+1 bytes. It
// stops with errOverLimit once more than limit bytes have been read.
func readAtMost(r io.Reader, buf []byte, limit int64) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(max(2*int64(cap(buf)), 4096), limit+1))
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):min(int64(cap(buf)), limit+1)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return buf, errOverLimit
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// Get returns a reader over key's value, or an error wrapping ErrNotFound.
// A value over the inline limit is not read yet: the reader fetches its
// chunks as they are read, with ctx, so reading after ctx ends fails. With
// Options.VerifyReads a value that no longer matches its key is an error
// wrapping ErrCorrupt (an ErrDigestMismatch): at Get for an inline value,
// at the end of reading for a chunked one.
func (s *Store) Get(ctx context.Context, key Key) (*Reader, error) {
	if err := checkKey(ctx, key); err != nil {
		return nil, fmt.Errorf("blob get: %w", err)
	}
	st, err := s.eng.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("blob get %s: %w", key, err)
	}
	return s.reader(ctx, key, st)
}

// Reader returns a reader over key's value from st, the stored form an
// engine call that reads the blob beside something else returned for key
// (ref.Backend.Resolve), read and verified as Get's reader is. A form
// that cannot be a value's (a negative size, an inline value of another
// size, both a chunk set and an object) is an error wrapping
// ErrInvalidArgument.
func (s *Store) Reader(ctx context.Context, key Key, st Stored) (*Reader, error) {
	err := checkKey(ctx, key)
	if err == nil && (st.Size < 0 || st.Inline() && int64(len(st.Value)) != st.Size || !st.Inline() && len(st.Value) != 0 || st.Chunks != 0 && st.Object != "") {
		err = fmt.Errorf("%w: %s: an inconsistent stored form", steaderr.ErrInvalidArgument, key)
	}
	if err != nil {
		return nil, fmt.Errorf("blob get: %w", err)
	}
	return s.reader(ctx, key, st)
}

// reader returns a reader over key's value stored as st, verifying an
// inline value at once when the store verifies reads.
func (s *Store) reader(ctx context.Context, key Key, st Stored) (*Reader, error) {
	if s.verify && st.Inline() {
		if got := KeyOf(st.Value); got != key {
			return nil, fmt.Errorf("blob get %s: %w: stored content hashes to %s", key, steaderr.ErrCorrupt, got)
		}
	}
	return newReader(ctx, s.eng, key, st, s.verify), nil
}

// Verify re-hashes key's stored value, streaming, and returns an error
// wrapping ErrCorrupt (an ErrDigestMismatch) when it no longer matches its
// key or its bytes are lost, or ErrNotFound when key is absent.
func (s *Store) Verify(ctx context.Context, key Key) error {
	if err := checkKey(ctx, key); err != nil {
		return fmt.Errorf("blob verify: %w", err)
	}
	st, err := s.eng.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("blob verify %s: %w", key, err)
	}
	if st.Inline() {
		if got := KeyOf(st.Value); got != key {
			return fmt.Errorf("blob verify %s: %w: stored content hashes to %s", key, steaderr.ErrCorrupt, got)
		}
		return nil
	}
	if _, err := newReader(ctx, s.eng, key, st, true).WriteTo(io.Discard); err != nil {
		return fmt.Errorf("blob verify: %w", err)
	}
	return nil
}

// ReapUploads discards the staged chunks of every chunked put whose
// upload lease lapsed (its process died or stalled), judged on the store's
// clock (Options.Now), and reports how many uploads it discarded. Opening a
// store and each GC sweep call it.
func (s *Store) ReapUploads(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("blob reap uploads: %w", err)
	}
	n, err := s.eng.ReapUploads(ctx, ReapUploadsParams{Now: s.pins.engineNow()})
	if err != nil {
		return n, fmt.Errorf("blob reap uploads: %w", err)
	}
	return n, nil
}

// Stat returns key's size without reading its value, or an error wrapping
// ErrNotFound.
func (s *Store) Stat(ctx context.Context, key Key) (Info, error) {
	if err := checkKey(ctx, key); err != nil {
		return Info{}, fmt.Errorf("blob stat: %w", err)
	}
	info, err := s.eng.Stat(ctx, key)
	if err != nil {
		return Info{}, fmt.Errorf("blob stat %s: %w", key, err)
	}
	return info, nil
}

// Has reports whether key is stored.
func (s *Store) Has(ctx context.Context, key Key) (bool, error) {
	_, err := s.Stat(ctx, key)
	if errors.Is(err, steaderr.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// List returns up to limit blobs with keys greater than after (the zero Key:
// from the start), in key order. Pass the last key of one page as after to
// get the next; an empty page is the end.
func (s *Store) List(ctx context.Context, after Key, limit int) ([]Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("blob list: %w", err)
	}
	if limit <= 0 {
		return nil, fmt.Errorf("blob list: %w: limit %d, want > 0", steaderr.ErrInvalidArgument, limit)
	}
	var page []Info
	err := s.eng.List(ctx, after, limit, func(info Info) bool {
		page = append(page, info)
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("blob list: %w", err)
	}
	return page, nil
}

// All yields every blob with a key greater than after, in strictly
// ascending key order, streaming. It walks the keys a page at a time (see
// Options.PageSize), asking for the next page after the last key yielded,
// and holds nothing of the engine's (no connection, no transaction, no
// lock) while the loop body runs, so the body may use the store freely and
// a slow loop blocks nobody.
//
// The walk is not one snapshot: every blob stored for the whole walk is
// yielded exactly once; a blob put or deleted during the walk may or may not
// be; no key is yielded twice. Once ctx ends, the walk stops with its
// error. An error is yielded once, last.
func (s *Store) All(ctx context.Context, after Key) iter.Seq2[Info, error] {
	return func(yield func(Info, error) bool) {
		page := make([]Info, 0, s.pageSize)
		for {
			if err := ctx.Err(); err != nil {
				yield(Info{}, fmt.Errorf("blob list: %w", err))
				return
			}
			page = page[:0]
			err := s.eng.List(ctx, after, s.pageSize, func(info Info) bool {
				page = append(page, info)
				return true
			})
			if err != nil {
				yield(Info{}, fmt.Errorf("blob list: %w", err))
				return
			}
			for _, info := range page {
				if err := ctx.Err(); err != nil {
					yield(Info{}, fmt.Errorf("blob list: %w", err))
					return
				}
				if !yield(info, nil) {
					return
				}
			}
			if len(page) < s.pageSize {
				return
			}
			after = page[len(page)-1].Key
		}
	}
}

// Delete removes key after arbitrating it like a garbage-collection sweep:
// it fails with an error wrapping ErrProtected while a live pin (this
// store's too) or a liveness source references key, and with ErrNotFound
// when key is absent.
func (s *Store) Delete(ctx context.Context, key Key) error {
	if err := checkKey(ctx, key); err != nil {
		return fmt.Errorf("blob delete: %w", err)
	}
	vs, err := s.eng.Delete(ctx, DeleteParams{Keys: []Key{key}, Now: s.pins.engineNow()})
	if err == nil && (len(vs) != 1 || vs[0].Key != key) {
		err = fmt.Errorf("engine answered %d verdicts for one key", len(vs))
	}
	if err == nil {
		err = vs[0].Err()
	}
	if err != nil {
		return fmt.Errorf("blob delete %s: %w", key, err)
	}
	return nil
}

// deleteBatch is how many keys one transaction of DeleteMany arbitrates.
const deleteBatch = 1000

// DeleteMany deletes each of keys as Delete would, arbitrating them in
// batches of up to a thousand keys, each batch one transaction (one
// commit), and returns one Verdict per key in keys' order: Deleted,
// Protected or Absent (Verdict.Err gives Delete's error). A key given
// twice is arbitrated once and gets the same verdict twice. A zero key
// fails the call before anything is deleted. A batch that fails ends the
// call with its error after the batches before it committed: the keys
// not arbitrated then have a Verdict with the zero Outcome.
func (s *Store) DeleteMany(ctx context.Context, keys []Key) ([]Verdict, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("blob delete: %w", err)
	}
	for _, key := range keys {
		if key.IsZero() {
			return nil, fmt.Errorf("blob delete: %w: zero key", steaderr.ErrInvalidKey)
		}
	}
	distinct := slices.Clone(keys)
	slices.SortFunc(distinct, Key.Compare)
	distinct = slices.Compact(distinct)
	verdicts := make(map[Key]Verdict, len(distinct))
	var err error
	for batch := range slices.Chunk(distinct, deleteBatch) {
		var vs []Verdict
		if vs, err = s.eng.Delete(ctx, DeleteParams{Keys: batch, Now: s.pins.engineNow()}); err == nil && len(vs) != len(batch) {
			err = fmt.Errorf("engine answered %d verdicts for %d keys", len(vs), len(batch))
		}
		if err != nil {
			err = fmt.Errorf("blob delete %d keys from %s: %w", len(batch), batch[0], err)
			break
		}
		for _, v := range vs {
			verdicts[v.Key] = v
		}
	}
	out := make([]Verdict, len(keys))
	for i, key := range keys {
		out[i] = verdicts[key]
		out[i].Key = key
	}
	return out, err
}

func checkKey(ctx context.Context, key Key) error {
	if key.IsZero() {
		return fmt.Errorf("%w: zero key", steaderr.ErrInvalidKey)
	}
	return ctx.Err()
}
