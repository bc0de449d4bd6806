package buildcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	repb "github.com/bazelbuild/remote-apis/build/bazel/remote/execution/v2"
	"google.golang.org/protobuf/proto"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// The storage model both protocols share (docs/guides/build-cache.md):
// content is cache content while its ref cache/cas/<hex> is live, an
// action result is the blob its ref cache/ac/<hex> names, put with every
// output it names as its children, and served only while every output
// is stored.

// The refs entries are kept by.
func casRef(hex string) string { return "cache/cas/" + hex }
func acRef(hex string) string  { return "cache/ac/" + hex }

func hexOf(k blob.Key) string { return strings.TrimPrefix(k.String(), "sha256:") }

// emptyKey is the empty blob's, which REAPI clients assume is always
// stored and never upload.
var emptyKey = blob.KeyOf(nil)

// maxTree bounds a tree blob read to find the files it names, in bytes.
const maxTree = 64 << 20

// IncompleteError refuses an action result naming outputs the cache does
// not hold.
type IncompleteError struct {
	// Missing are the digests not stored, in the order the result names
	// them.
	Missing []*repb.Digest
}

func (e *IncompleteError) Error() string {
	names := make([]string, 0, min(len(e.Missing), 5))
	for _, d := range e.Missing[:min(len(e.Missing), 5)] {
		names = append(names, fmt.Sprintf("%s/%d", d.GetHash(), d.GetSizeBytes()))
	}
	more := ""
	if len(e.Missing) > 5 {
		more = fmt.Sprintf(" and %d more", len(e.Missing)-5)
	}
	return fmt.Sprintf("the action result names %d outputs not in the cache: %s%s", len(e.Missing), strings.Join(names, ", "), more)
}

// digestKey returns the key of a REAPI digest, an error wrapping
// ErrInvalidArgument when it is not a SHA-256 digest.
func digestKey(d *repb.Digest) (blob.Key, error) {
	k, err := blob.ParseKey("sha256:" + d.GetHash())
	if err != nil || d.GetSizeBytes() < 0 {
		return blob.Key{}, fmt.Errorf("%w: digest %.80q/%d is not a SHA-256 digest with a size", steaderr.ErrInvalidArgument, d.GetHash(), d.GetSizeBytes())
	}
	if k == emptyKey && d.GetSizeBytes() != 0 {
		return blob.Key{}, fmt.Errorf("%w: the empty blob's digest with size %d", steaderr.ErrInvalidArgument, d.GetSizeBytes())
	}
	return k, nil
}

// hasContent reports whether key is cache content, renewing its entry
// (ref.GetTouch: a write per half TTL).
func (c *Cache) hasContent(ctx context.Context, key blob.Key) (bool, error) {
	if key == emptyKey {
		return true, nil
	}
	_, err := c.touch(ctx, casRef(hexOf(key)))
	if errors.Is(err, steaderr.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// keepOutput reports whether an output of a live action result is
// stored, and gives it a live entry of its own again if it lapsed while
// the result kept it, so a client handed the result can read it.
func (c *Cache) keepOutput(ctx context.Context, key blob.Key) (bool, error) {
	if ok, err := c.hasContent(ctx, key); ok || err != nil {
		return ok, err
	}
	_, err := c.st.Refs.Set(ctx, casRef(hexOf(key)), key, ref.SetOptions{TTL: c.opts.TTL})
	if errors.Is(err, steaderr.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// openContent opens cache content, renewing its entry; ErrNotFound when
// key is not cache content.
// The entry and the blob are read in one call (ref.Store.Open), renewed
// as touch renews it; an entry naming another key (set through /v1/refs)
// still says key is cache content, which is then read on its own.
func (c *Cache) openContent(ctx context.Context, key blob.Key) (*blob.Reader, error) {
	if key == emptyKey {
		return c.st.Blobs.Get(ctx, key)
	}
	name := casRef(hexOf(key))
	rf, rd, err := c.st.Refs.Open(ctx, name, c.opts.TTL)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	c.recent.read(name, c.opts.Now())
	if rf.Key == key {
		return rd, nil
	}
	rd.Close()
	return c.st.Blobs.Get(ctx, key)
}

// putContent stores r under key, refusing content that does not hash to
// it (ErrDigestMismatch) or is larger than MaxBlobSize, and keeps it for
// TTL.
func (c *Cache) putContent(ctx context.Context, key blob.Key, r io.Reader) error {
	body := &capped{r: r, max: c.opts.MaxBlobSize}
	if key.IsZero() || key == emptyKey {
		return c.st.Blobs.PutExpect(ctx, key, body)
	}
	// Content and its cas ref in one commit when it is small
	// (ref.Store.Put), as keepContent sets the ref.
	_, err := c.st.Refs.Put(ctx, body, ref.PutOptions{Expect: key, Refs: []ref.PutRef{{Name: casRef(hexOf(key)), SetOptions: ref.SetOptions{TTL: c.opts.TTL}}}})
	return err
}

// keepContent makes key, stored and pinned, cache content for TTL.
func (c *Cache) keepContent(ctx context.Context, key blob.Key) error {
	if key == emptyKey {
		return nil
	}
	_, err := c.st.Refs.Set(ctx, casRef(hexOf(key)), key, ref.SetOptions{TTL: c.opts.TTL})
	return err
}

// capped reads r, failing with ErrTooLarge past max bytes.
type capped struct {
	r        io.Reader
	max, got int64
}

func (c *capped) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.got += int64(n); c.got > c.max {
		return n, fmt.Errorf("%w: over %d bytes", steaderr.ErrTooLarge, c.max)
	}
	return n, err
}

// outputs returns the keys of every output res names (output files,
// output directories' trees and the files in them, stdout, stderr),
// distinct and sorted, and the digests of those present does not find.
// A tree's files are only looked for when the tree is present.
func (c *Cache) outputs(ctx context.Context, res *repb.ActionResult, present func(context.Context, blob.Key) (bool, error)) ([]blob.Key, []*repb.Digest, error) {
	var (
		keys    []blob.Key
		missing []*repb.Digest
		seen    = map[blob.Key]bool{}
	)
	check := func(d *repb.Digest) (bool, error) {
		k, err := digestKey(d)
		if err != nil {
			return false, err
		}
		if seen[k] || k == emptyKey {
			return true, nil
		}
		seen[k] = true
		ok, err := present(ctx, k)
		switch {
		case err != nil:
			return false, err
		case ok:
			keys = append(keys, k)
		default:
			missing = append(missing, d)
		}
		return ok, nil
	}
	var direct []*repb.Digest
	for _, f := range res.GetOutputFiles() {
		direct = append(direct, f.GetDigest())
	}
	for _, d := range []*repb.Digest{res.GetStdoutDigest(), res.GetStderrDigest()} {
		if d != nil {
			direct = append(direct, d)
		}
	}
	for _, d := range direct {
		if _, err := check(d); err != nil {
			return nil, nil, err
		}
	}
	for _, dir := range res.GetOutputDirectories() {
		ok, err := check(dir.GetTreeDigest())
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			continue
		}
		tree, err := c.readTree(ctx, dir.GetTreeDigest())
		if errors.Is(err, steaderr.ErrNotFound) {
			missing = append(missing, dir.GetTreeDigest())
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		for _, d := range append([]*repb.Directory{tree.GetRoot()}, tree.GetChildren()...) {
			for _, f := range d.GetFiles() {
				if _, err := check(f.GetDigest()); err != nil {
					return nil, nil, err
				}
			}
		}
	}
	slices.SortFunc(keys, blob.Key.Compare)
	return keys, missing, nil
}

// readTree reads and parses a stored Tree.
func (c *Cache) readTree(ctx context.Context, d *repb.Digest) (*repb.Tree, error) {
	k, err := digestKey(d)
	if err != nil {
		return nil, err
	}
	b, err := c.readBlob(ctx, k, maxTree)
	if err != nil {
		return nil, err
	}
	var tree repb.Tree
	if err := proto.Unmarshal(b, &tree); err != nil {
		return nil, fmt.Errorf("%w: output directory tree %s is not a Tree: %v", steaderr.ErrInvalidArgument, d.GetHash(), err)
	}
	return &tree, nil
}

// readBlob reads a stored blob of at most limit bytes whole.
func (c *Cache) readBlob(ctx context.Context, k blob.Key, limit int64) ([]byte, error) {
	rd, err := c.st.Blobs.Get(ctx, k)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	if rd.Size() > limit {
		return nil, fmt.Errorf("%w: %s is %d bytes, over %d", steaderr.ErrTooLarge, k, rd.Size(), limit)
	}
	return readWhole(rd)
}

// readWhole reads rd's value into one buffer of its size, and reads on to
// its end, where the reader reports stored bytes that no longer match.
func readWhole(rd *blob.Reader) ([]byte, error) {
	b := make([]byte, rd.Size())
	if _, err := io.ReadFull(rd, b); err != nil {
		return nil, err
	}
	var one [1]byte
	switch n, err := rd.Read(one[:]); {
	case n > 0:
		return nil, fmt.Errorf("%w: %s holds more than its %d bytes", steaderr.ErrCorrupt, rd.Key(), rd.Size())
	case err != io.EOF:
		return nil, err
	}
	return b, nil
}

// listBlob is a blob keepTogether stores: content naming children.
type listBlob struct {
	content  []byte
	children []blob.Key
}

// listsOf returns the blobs that keep keys (sorted, distinct) together
// and the keys a result is then put with as children: keys themselves
// when they are at most blob.MaxChildren, else blobs listing them a
// MaxChildren at a time, as many levels as it takes. A list blob's
// content names its children, so it is the same however often it is
// made.
func listsOf(keys []blob.Key) (lists []listBlob, top []blob.Key) {
	for len(keys) > blob.MaxChildren {
		var level []blob.Key
		for part := range slices.Chunk(keys, blob.MaxChildren) {
			var b bytes.Buffer
			b.WriteString("stead build cache: outputs kept together\n")
			for _, k := range part {
				b.WriteString(k.String())
				b.WriteByte('\n')
			}
			lists = append(lists, listBlob{content: b.Bytes(), children: part})
			level = append(level, blob.KeyOf(b.Bytes()))
		}
		slices.SortFunc(level, blob.Key.Compare)
		keys = level
	}
	return lists, keys
}

// keepTogether stores the list blobs of listsOf(keys) and returns the
// keys a result is put with as children.
func (c *Cache) keepTogether(ctx context.Context, keys []blob.Key) ([]blob.Key, error) {
	lists, top := listsOf(keys)
	for _, l := range lists {
		if _, err := c.st.Blobs.PutWith(ctx, bytes.NewReader(l.content), blob.PutOptions{Children: l.children}); err != nil {
			return nil, err
		}
	}
	return top, nil
}

// putResult stores body as the result of the action whose digest is hex,
// replacing any before it, for TTL. When res (body parsed) is not nil,
// every output it names must be cache content (else an IncompleteError
// and nothing changes), and the result is put with them as its children,
// so they are kept while it is.
func (c *Cache) putResult(ctx context.Context, hex string, body []byte, res *repb.ActionResult) error {
	var children []blob.Key
	if res != nil {
		keys, missing, err := c.outputs(ctx, res, c.hasContent)
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			return &IncompleteError{Missing: missing}
		}
		if children, err = c.keepTogether(ctx, keys); err != nil {
			return err
		}
	}
	stored, err := c.st.Blobs.PutWith(ctx, bytes.NewReader(body), blob.PutOptions{Children: children})
	key := stored.Key
	if errors.Is(err, steaderr.ErrChildrenFixed) {
		// The same bytes are stored already with other children (put as
		// content, say): keep them as they are; the result is then
		// served only while its outputs are stored (getResult).
		key, err = c.st.Blobs.Put(ctx, bytes.NewReader(body))
	}
	if err != nil {
		return err
	}
	_, err = c.st.Refs.Set(ctx, acRef(hex), key, ref.SetOptions{TTL: c.opts.TTL})
	return err
}

// getResult returns the result stored for the action whose digest is
// hex, renewing its entry, and res, its parse as an ActionResult (nil
// when it is not one: ccache's entries). A result naming an output that
// is not stored is not served (ErrNotFound); every output it names is
// renewed with it.
func (c *Cache) getResult(ctx context.Context, hex string) (body []byte, res *repb.ActionResult, err error) {
	rf, err := c.touch(ctx, acRef(hex))
	if err != nil {
		return nil, nil, err
	}
	body, res, err = c.readResult(ctx, rf.Key)
	if err != nil {
		return nil, nil, err
	}
	if res == nil {
		return body, nil, nil
	}
	_, missing, err := c.outputs(ctx, res, c.keepOutput)
	if errors.Is(err, steaderr.ErrInvalidArgument) {
		return nil, nil, fmt.Errorf("action %s: %w: %w", hex, steaderr.ErrNotFound, err)
	}
	if err != nil {
		return nil, nil, err
	}
	if len(missing) > 0 {
		return nil, nil, fmt.Errorf("action %s: %w: %w", hex, steaderr.ErrNotFound, &IncompleteError{Missing: missing})
	}
	return body, res, nil
}

// readResult returns the result blob key, read whole, and its parse as
// an ActionResult (nil when it is not one). A key names its content, so
// what was read once is answered from memory again: the live entry the
// caller read keeps the blob stored. Neither is to be modified.
func (c *Cache) readResult(ctx context.Context, key blob.Key) ([]byte, *repb.ActionResult, error) {
	if r, ok := c.results.get(key); ok {
		return r.body, r.res, nil
	}
	body, err := c.readBlob(ctx, key, MaxActionResult)
	if err != nil {
		return nil, nil, err
	}
	res := parseResult(body)
	c.results.add(key, storedResult{body: body, res: res})
	return body, res, nil
}

// maxResultMemo bounds the bytes of result blobs kept in memory; past it
// the memory starts afresh.
const maxResultMemo = 64 << 20

// storedResult is a result blob's bytes and parse.
type storedResult struct {
	body []byte
	res  *repb.ActionResult
}

// resultMemo remembers result blobs read, by key.
type resultMemo struct {
	mu    sync.Mutex
	m     map[blob.Key]storedResult
	bytes int
}

func (r *resultMemo) get(key blob.Key) (storedResult, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sr, ok := r.m[key]
	return sr, ok
}

func (r *resultMemo) add(key blob.Key, sr storedResult) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bytes+len(sr.body) > maxResultMemo || r.m == nil {
		r.m, r.bytes = map[blob.Key]storedResult{}, 0
	}
	if _, ok := r.m[key]; !ok {
		r.m[key] = sr
		r.bytes += len(sr.body)
	}
}

// parseResult returns body parsed as an ActionResult, or nil.
func parseResult(body []byte) *repb.ActionResult {
	var res repb.ActionResult
	if len(body) == 0 || proto.Unmarshal(body, &res) != nil {
		return nil
	}
	return &res
}
