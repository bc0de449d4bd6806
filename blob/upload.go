package blob

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/steadkit/stead/internal/validate"
	"github.com/steadkit/stead/steaderr"
)

// An Upload is a value written in parts and then committed under its key:
// a large put, a registry's chunked push, a build cache's resumable write
// (docs/decisions/0045-durable-uploads.md). Its size, running hash and
// owner are in the store, committed with each part, so any Store over the
// same database, in this process or another, continues it by ID after the
// process that began it died. An upload nobody appends to for its lease
// is reaped with its parts (Store.ReapUploads). An Upload is safe for
// concurrent use; appends to one upload through several Uploads (several
// servers) serialize in the store: each starts where the last committed
// one ended, and one that lost the race fails with ErrConflict.
type Upload struct {
	s     *Store
	set   ChunkSet
	owner string
	lease time.Duration

	mu      sync.Mutex
	size    int64     // bytes committed, as of state
	hash    hash.Hash // the running hash of those bytes
	stale   bool      // an append's outcome is unknown: re-read before the next step
	ended   bool
	created bool // Commit stored the blob
}

// UploadOptions configure BeginUpload and ResumeUpload.
type UploadOptions struct {
	// Owner is who may continue the upload (a registry's repository):
	// ResumeUpload naming another owner finds none. At most
	// MaxUploadOwner bytes of UTF-8 without NUL (a database's text);
	// "" is an owner like any other.
	Owner string
	// Lease is how long the upload lasts without an append, in whole
	// microseconds, at most MaxUploadLease; zero: Options.UploadLease.
	Lease time.Duration
}

// BeginUpload starts an empty upload, owned by opts.Owner.
func (s *Store) BeginUpload(ctx context.Context, opts UploadOptions) (*Upload, error) {
	u, err := s.newUpload(ctx, 0, opts)
	if err != nil {
		return nil, fmt.Errorf("blob begin upload: %w", err)
	}
	state, err := u.hash.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("blob begin upload: %w", err)
	}
	u.set, err = s.eng.BeginUpload(ctx, BeginUploadParams{Owner: u.owner, State: state, Lease: u.lease, Now: s.pins.engineNow()})
	if err != nil {
		return nil, fmt.Errorf("blob begin upload: %w", err)
	}
	return u, nil
}

// ResumeUpload continues the upload id (an Upload's ID) begun by opts.Owner
// through any Store over the same database. An id that is malformed, was
// never begun, has ended (committed, aborted or reaped) or is another
// owner's is an error wrapping ErrLost, the same for each.
func (s *Store) ResumeUpload(ctx context.Context, id string, opts UploadOptions) (*Upload, error) {
	set, ok := ParseUploadID(id)
	if !ok {
		return nil, fmt.Errorf("blob resume upload %.40q: %w: no such upload", id, steaderr.ErrLost)
	}
	u, err := s.newUpload(ctx, set, opts)
	if err != nil {
		return nil, fmt.Errorf("blob resume upload %s: %w", id, err)
	}
	if err := u.refresh(ctx); errors.Is(err, steaderr.ErrLost) {
		// One answer for every upload not to be had, whoever's it is.
		return nil, fmt.Errorf("blob resume upload %s: %w: no such upload", id, steaderr.ErrLost)
	} else if err != nil {
		return nil, fmt.Errorf("blob resume upload %s: %w", id, err)
	}
	return u, nil
}

// newUpload checks opts and returns an Upload of set with an empty hash.
func (s *Store) newUpload(ctx context.Context, set ChunkSet, opts UploadOptions) (*Upload, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(opts.Owner) > MaxUploadOwner || !utf8.ValidString(opts.Owner) || strings.IndexByte(opts.Owner, 0) >= 0 {
		return nil, fmt.Errorf("%w: upload owner: want at most %d bytes of UTF-8, no NUL", steaderr.ErrInvalidArgument, MaxUploadOwner)
	}
	lease := opts.Lease
	switch {
	case lease == 0:
		lease = s.lease
	case lease < time.Microsecond || lease > MaxUploadLease || lease%time.Microsecond != 0:
		return nil, fmt.Errorf("%w: upload lease %v: want whole microseconds up to %v", steaderr.ErrInvalidArgument, lease, MaxUploadLease)
	}
	return &Upload{s: s, set: set, owner: opts.Owner, lease: lease, hash: sha256.New()}, nil
}

// refresh reads the upload's committed size and hash from the store. u.mu
// is held, or u not yet shared.
func (u *Upload) refresh(ctx context.Context) error {
	st, err := u.s.eng.UploadStatus(ctx, u.set)
	if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare([]byte(st.Owner), []byte(u.owner)) != 1 {
		return fmt.Errorf("%w: no such upload", steaderr.ErrLost)
	}
	if len(st.State) == 0 {
		// Begun before uploads kept their state: it cannot be continued,
		// only aborted or reaped, and its client starts over.
		return fmt.Errorf("%w: no such upload", steaderr.ErrLost)
	}
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(st.State); err != nil {
		return fmt.Errorf("%w: the upload's recorded hash state: %v", steaderr.ErrCorrupt, err)
	}
	u.size, u.hash, u.stale = st.Size, h, false
	return nil
}

// ID names the upload for ResumeUpload: its chunk set's UploadID, drawn
// at random, so that one upload's ID tells nothing of another's.
func (u *Upload) ID() string { return u.set.UploadID() }

// UploadID is the id of the upload of set: 16 lowercase hex digits.
func (set ChunkSet) UploadID() string { return fmt.Sprintf("%016x", int64(set)) }

// ParseUploadID reads an UploadID, refusing any other spelling.
func ParseUploadID(id string) (ChunkSet, bool) {
	n, err := strconv.ParseUint(id, 16, 63)
	if err != nil || n == 0 || ChunkSet(n).UploadID() != id {
		return 0, false
	}
	return ChunkSet(n), true
}

// HashState returns the running hash of the upload's bytes as of this
// Upload's last step, as its engine records it with each append
// (UploadStatus.State): for a server answering a remote engine, whose
// Uploads continue from it.
func (u *Upload) HashState() ([]byte, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.hash.(encoding.BinaryMarshaler).MarshalBinary()
}

// Size returns how many bytes the upload holds, as of this Upload's last
// step (another's appends are seen by the next).
func (u *Upload) Size() int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.size
}

// Sum returns the key the upload's bytes hash to, as of this Upload's
// last step: the key Commit stores them under.
func (u *Upload) Sum() Key {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.sum()
}

// sum is Sum with u.mu held.
func (u *Upload) sum() Key {
	key := Key{valid: true}
	u.hash.Sum(key.digest[:0])
	return key
}

// start locks u for one step, re-reading its state when the last step's
// outcome is unknown, and refuses an ended upload.
func (u *Upload) start(ctx context.Context) error {
	u.mu.Lock()
	if err := ctx.Err(); err != nil {
		u.mu.Unlock()
		return err
	}
	if u.ended {
		u.mu.Unlock()
		return fmt.Errorf("%w: the upload has ended", steaderr.ErrLost)
	}
	if u.stale {
		if err := u.refresh(ctx); err != nil {
			u.mu.Unlock()
			return err
		}
	}
	return nil
}

// Append adds r's content, read to its end, after the upload's bytes, and
// returns how many bytes it committed. Without a bytes tier the content
// is committed a chunk at a time, so a source that fails keeps the whole
// chunks before the failure; on a tier the bytes within the store's
// inline limit are rows and the rest one object, and an append is
// committed whole or not at all. An
// upload past Options.MaxSize fails with ErrTooLarge, the bytes before
// that point kept. Another writer's append committed since this Upload's
// last step fails with ErrConflict: resume to see where the upload ends.
func (u *Upload) Append(ctx context.Context, r io.Reader) (int64, error) {
	if err := u.start(ctx); err != nil {
		return 0, fmt.Errorf("blob upload %s: append: %w", u.ID(), err)
	}
	defer u.mu.Unlock()
	before := u.size
	err := u.append(ctx, r)
	if err != nil {
		err = fmt.Errorf("blob upload %s: append at %d: %w", u.ID(), u.size, err)
	}
	return u.size - before, err
}

// AppendObject is Append with r's content one object chunk on an engine
// with a bytes tier, whatever the inline limit: for a server appending
// what a remote engine's Store wrote as one (Streamer.WriteValue).
// Without a tier it is Append.
func (u *Upload) AppendObject(ctx context.Context, r io.Reader) (int64, error) {
	if err := u.start(ctx); err != nil {
		return 0, fmt.Errorf("blob upload %s: append: %w", u.ID(), err)
	}
	defer u.mu.Unlock()
	before := u.size
	var err error
	if u.s.eng.Tiered() {
		err = u.appendObject(ctx, r, u.s.maxSize-u.size)
	} else {
		err = u.appendChunks(ctx, r, u.s.maxSize-u.size)
	}
	if err != nil {
		err = fmt.Errorf("blob upload %s: append at %d: %w", u.ID(), u.size, err)
	}
	return u.size - before, err
}

func (u *Upload) append(ctx context.Context, r io.Reader) error {
	s := u.s
	limit := s.maxSize - u.size
	if s.eng.Tiered() {
		// Bytes within the inline limit are rows, as an inline value's
		// are; the rest is one object.
		if room := s.inline - u.size; room > 0 {
			head := make([]byte, 0, min(room+1, 64<<10))
			head, err := readAtMost(r, head, min(room, limit))
			switch {
			case errors.Is(err, errOverLimit) && int64(len(head)) > limit:
				return fmt.Errorf("%w: more than %d bytes", steaderr.ErrTooLarge, s.maxSize)
			case errors.Is(err, errOverLimit):
				return u.appendObject(ctx, io.MultiReader(bytes.NewReader(head), r), limit)
			case err != nil:
				// Less than a chunk arrived: like a failed object
				// append, it commits nothing.
				return fmt.Errorf("read content: %w", err)
			}
			return u.appendChunks(ctx, bytes.NewReader(head), limit)
		}
		return u.appendObject(ctx, r, limit)
	}
	return u.appendChunks(ctx, r, limit)
}

// appendChunks commits r's content chunk by chunk, each with the hash
// state after it, reading and hashing the next chunk while the last is
// written.
func (u *Upload) appendChunks(ctx context.Context, r io.Reader, limit int64) error {
	s := u.s
	chunks, stop := s.readChunks(r, limit, u.hash)
	defer stop()
	for c := range chunks {
		if c.err != nil {
			u.stale = true // the hash may hold what was not committed
			return c.err
		}
		err := s.eng.WriteChunk(ctx, WriteChunkParams{Set: u.set, Off: u.size, Data: c.data, State: c.state, Lease: u.lease, Now: s.pins.engineNow()})
		if err != nil {
			// The write may have committed, or not, and the hash may
			// hold the next chunk too.
			u.stale = true
			return err
		}
		u.size += int64(len(c.data))
		c.release()
	}
	return nil
}

// appendObject streams r's content into one object chunk, hashed on the
// reading goroutine a chunk ahead of the bucket's write.
func (u *Upload) appendObject(ctx context.Context, r io.Reader, limit int64) error {
	s := u.s
	// An object chunk holds at least a byte: empty content appends none.
	var first [1]byte
	switch n, err := io.ReadFull(r, first[:]); {
	case n == 0 && err == io.EOF:
		return nil
	case err != nil:
		return fmt.Errorf("read content: %w", err)
	}
	r = io.MultiReader(bytes.NewReader(first[:]), r)
	base, err := u.hash.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return err
	}
	chunks, stopReading := s.readChunks(io.TeeReader(r, u.hash), limit, nil)
	stop := sync.OnceFunc(stopReading)
	defer stop()
	src := &chunkSource{chunks: chunks}
	var stateErr error
	n, err := s.eng.WriteValue(ctx, WriteValueParams{Set: u.set, Off: u.size, Value: src, Lease: u.lease, Now: s.pins.engineNow, State: func() []byte {
		stop() // the hash has seen every byte once the reading goroutine is done
		state, err := u.hash.(encoding.BinaryMarshaler).MarshalBinary()
		stateErr = err
		return state
	}})
	stop()
	switch {
	case src.err != nil:
		err = src.err
	case err == nil && stateErr != nil:
		err = stateErr
	}
	if err != nil {
		u.stale = true
		if uerr := u.hash.(encoding.BinaryUnmarshaler).UnmarshalBinary(base); uerr != nil {
			return errors.Join(err, uerr)
		}
		return err
	}
	u.size += n
	return nil
}

// CommitOptions are the options of Upload.Commit.
type CommitOptions struct {
	// Expect, when not zero, is the key the upload's bytes must hash to
	// (else ErrDigestMismatch, and the upload stays, to be aborted).
	Expect Key
	// Children are the blobs the value references, as PutOptions.Children.
	Children []Key
	// Owner, TTL and Now, when Owner is set, name the pin the commit
	// takes, exactly as the engine's Put pins, for a server committing a
	// remote client's upload; otherwise the commit is pinned as this
	// store's puts are.
	Owner string
	TTL   time.Duration
	Now   time.Time
	// Chunked publishes the upload's chunks as they are, even within the
	// inline limit: for a server publishing a remote engine's upload as
	// that engine's Put with Chunks does, its own Store having chosen the
	// value's form.
	Chunked bool
}

// Created reports whether the upload's Commit stored its blob: false
// before a successful Commit, and after one that found the key stored
// already. Of concurrent puts of one key one is told it stored it
// (Backend.Put says when none is).
func (u *Upload) Created() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.created
}

// Commit stores the upload's bytes under their key, pinned as a put's
// are, and ends the upload; it returns the key. The upload's hash is its
// own, taken as its bytes were committed, so Commit reads nothing back
// (a value within the inline limit is read once to store it inline). A
// key stored already is a successful commit that discards the upload. An
// upload already ended, reaped or appended to elsewhere meanwhile is an
// error wrapping ErrLost or ErrConflict; after any error before the
// publish (a mismatch, bad children) the upload stays.
func (u *Upload) Commit(ctx context.Context, opts CommitOptions) (Key, error) {
	if err := u.start(ctx); err != nil {
		return Key{}, fmt.Errorf("blob upload %s: commit: %w", u.ID(), err)
	}
	defer u.mu.Unlock()
	key, err := u.commit(ctx, opts)
	if err != nil {
		return Key{}, fmt.Errorf("blob upload %s: commit: %w", u.ID(), err)
	}
	return key, nil
}

func (u *Upload) commit(ctx context.Context, opts CommitOptions) (Key, error) {
	s := u.s
	key := u.sum()
	if !opts.Expect.IsZero() && key != opts.Expect {
		return Key{}, fmt.Errorf("%w: the upload's %d bytes hash to %s", steaderr.ErrDigestMismatch, u.size, key)
	}
	children, err := checkChildren(opts.Children)
	if err != nil {
		return Key{}, err
	}
	p, err := withChildren(PutParams{Key: key, Chunks: u.set, Size: u.size}, children)
	if err != nil {
		return Key{}, err
	}
	if opts.Owner != "" {
		if err := checkPin(opts.Owner, opts.TTL, opts.Now); err != nil {
			return Key{}, err
		}
		p.Owner, p.TTL, p.Now = opts.Owner, opts.TTL, opts.Now
	}
	if u.size <= s.inline && !opts.Chunked {
		inline, ok, err := u.readInline(ctx)
		if err != nil {
			return Key{}, err
		}
		if ok {
			p.Chunks, p.Size, p.Value = 0, 0, inline
		}
	}
	var created, skipped bool
	if opts.Owner != "" {
		created, err = s.eng.Put(ctx, p)
	} else {
		created, skipped, err = s.pins.put(ctx, s.eng, p, nil)
	}
	if err != nil {
		u.stale = true
		return Key{}, err
	}
	u.ended, u.created = true, created
	if p.Chunks == 0 || skipped {
		// An inline publish, or one this store's live pin made needless,
		// left the upload: end it. The value is stored whatever the
		// abort's outcome: an upload it leaves is reaped with its lease.
		var aerr error
		s.abortUpload(ctx, u.set, &aerr)
	}
	return key, nil
}

// readInline reads the upload's bytes when its chunks are rows, for an
// inline publish; ok is false when one is an object.
func (u *Upload) readInline(ctx context.Context) (value []byte, ok bool, err error) {
	value = make([]byte, 0, u.size)
	for int64(len(value)) < u.size {
		c, err := u.s.eng.ReadChunk(ctx, u.set, int64(len(value)))
		switch {
		case errors.Is(err, steaderr.ErrNotFound):
			return nil, false, fmt.Errorf("%w: the upload has no chunk at %d (aborted or reaped)", steaderr.ErrLost, len(value))
		case err != nil:
			return nil, false, err
		case c.Object != "":
			return nil, false, nil
		case c.Start != int64(len(value)) || len(c.Data) == 0 || c.Start+int64(len(c.Data)) > u.size:
			return nil, false, fmt.Errorf("%w: the upload's chunk at %d is [%d, %d)", steaderr.ErrCorrupt, len(value), c.Start, c.Start+int64(len(c.Data)))
		}
		value = append(value, c.Data...)
	}
	// Another writer may have appended since this Upload's last step; its
	// bytes are not to be dropped by a publish of fewer.
	st, err := u.s.eng.UploadStatus(ctx, u.set)
	switch {
	case err != nil:
		return nil, false, err
	case st.Size != u.size:
		u.stale = true
		return nil, false, fmt.Errorf("%w: the upload holds %d bytes, not %d (another writer appended)", steaderr.ErrConflict, st.Size, u.size)
	}
	return value, true, nil
}

// checkPin checks a pin named by a caller: a valid owner, a TTL and an
// instant in whole (positive) microseconds.
func checkPin(owner string, ttl time.Duration, now time.Time) error {
	if err := validate.Name("pin owner", owner); err != nil {
		return err
	}
	switch {
	case ttl <= 0 || ttl%time.Microsecond != 0:
		return fmt.Errorf("%w: pin TTL %v: want a positive whole number of microseconds", steaderr.ErrInvalidArgument, ttl)
	case !now.Equal(now.Truncate(time.Microsecond)):
		return fmt.Errorf("%w: pin instant %v: want a whole microsecond", steaderr.ErrInvalidArgument, now)
	}
	return nil
}

// Abort discards the upload and its bytes; an upload already ended is
// not an error.
func (u *Upload) Abort(ctx context.Context) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.ended = true
	if err := u.s.eng.AbortUpload(ctx, u.set); err != nil {
		return fmt.Errorf("blob upload %s: abort: %w", u.ID(), err)
	}
	return nil
}
