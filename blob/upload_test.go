package blob_test

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/memory"
	"github.com/steadkit/stead/steaderr"
)

// uploadStore returns a Store over a fresh memory engine with opts, and
// its engine's blob seam.
func uploadStore(t *testing.T, opts blob.Options) (*blob.Store, blob.Backend) {
	t.Helper()
	eng := memory.New()
	t.Cleanup(func() { eng.Close() })
	return blob.NewStore(eng.Blobs(), opts), eng.Blobs()
}

// beginCounter counts the uploads begun through it.
type beginCounter struct {
	blob.Backend
	mu     sync.Mutex
	begins int
}

func (c *beginCounter) BeginUpload(ctx context.Context, p blob.BeginUploadParams) (blob.ChunkSet, error) {
	c.mu.Lock()
	c.begins++
	c.mu.Unlock()
	return c.Backend.BeginUpload(ctx, p)
}

// TestUploadRefusesBadOptions: an owner over MaxUploadOwner bytes or not
// UTF-8, and a lease that is not whole microseconds up to MaxUploadLease,
// are ErrInvalidArgument to BeginUpload and ResumeUpload, before the
// engine is asked; the bounds themselves are taken.
func TestUploadRefusesBadOptions(t *testing.T) {
	t.Parallel()
	eng := memory.New()
	t.Cleanup(func() { eng.Close() })
	counter := &beginCounter{Backend: eng.Blobs()}
	s := blob.NewStore(counter, blob.Options{})
	live, err := s.BeginUpload(t.Context(), blob.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts blob.UploadOptions
	}{
		{"owner one byte too long", blob.UploadOptions{Owner: strings.Repeat("o", blob.MaxUploadOwner+1)}},
		{"owner of multi-byte characters too long", blob.UploadOptions{Owner: strings.Repeat("仓", blob.MaxUploadOwner/3+1)}},
		{"owner not UTF-8", blob.UploadOptions{Owner: "repo\xff"}},
		{"owner cut inside a character", blob.UploadOptions{Owner: "仓"[:2]}},
		{"owner with a NUL", blob.UploadOptions{Owner: "library/a\x00b"}},
		{"negative lease", blob.UploadOptions{Lease: -time.Second}},
		{"lease of a nanosecond", blob.UploadOptions{Lease: time.Nanosecond}},
		{"lease not whole microseconds", blob.UploadOptions{Lease: time.Second + time.Nanosecond}},
		{"lease past the bound", blob.UploadOptions{Lease: blob.MaxUploadLease + time.Microsecond}},
	} {
		if _, err := s.BeginUpload(t.Context(), tc.opts); !errors.Is(err, steaderr.ErrInvalidArgument) {
			t.Errorf("BeginUpload with %s = %v, want ErrInvalidArgument", tc.name, err)
		}
		if _, err := s.ResumeUpload(t.Context(), live.ID(), tc.opts); !errors.Is(err, steaderr.ErrInvalidArgument) {
			t.Errorf("ResumeUpload with %s = %v, want ErrInvalidArgument", tc.name, err)
		}
	}
	if counter.begins != 1 {
		t.Fatalf("the engine began %d uploads, want only the first", counter.begins)
	}
	for _, opts := range []blob.UploadOptions{
		{Owner: strings.Repeat("o", blob.MaxUploadOwner)},
		{Owner: strings.Repeat("仓", blob.MaxUploadOwner/3)},
		{Lease: time.Microsecond},
		{Lease: blob.MaxUploadLease},
	} {
		if _, err := s.BeginUpload(t.Context(), opts); err != nil {
			t.Errorf("BeginUpload(owner of %d bytes, lease %v) at the bounds: %v", len(opts.Owner), opts.Lease, err)
		}
	}
}

// TestUploadLease: an upload lasts its lease (the store's UploadLease,
// or its own) from its last append, on the store's clock, and is reaped
// from its end on.
func TestUploadLease(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	s, _ := uploadStore(t, blob.Options{UploadLease: time.Minute, Now: clock})
	ctx := t.Context()
	byDefault, err := s.BeginUpload(ctx, blob.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	own, err := s.BeginUpload(ctx, blob.UploadOptions{Lease: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	reap := func(want int) {
		t.Helper()
		if n, err := s.ReapUploads(ctx); err != nil || n != want {
			t.Fatalf("ReapUploads = %d, %v; want %d", n, err, want)
		}
	}
	advance(50 * time.Second)
	if _, err := own.Append(ctx, strings.NewReader("renewed at 50s")); err != nil {
		t.Fatal(err)
	}
	advance(10*time.Second - time.Microsecond)
	reap(0)
	advance(time.Microsecond) // the default lease ends: reaped from its end on
	reap(1)
	if _, err := byDefault.Append(ctx, strings.NewReader("late")); !errors.Is(err, steaderr.ErrLost) {
		t.Fatalf("Append to a reaped upload = %v, want ErrLost", err)
	}
	advance(time.Minute + 50*time.Second - time.Microsecond) // 50s + 2m - a µs
	reap(0)
	advance(time.Microsecond)
	reap(1)
}

// TestUploadMaxSize: an Append past Options.MaxSize is ErrTooLarge and
// keeps the bytes before that point, up to MaxSize; an upload at MaxSize
// takes no byte more and commits as it is.
func TestUploadMaxSize(t *testing.T) {
	t.Parallel()
	const maxSize = 5000
	s, _ := uploadStore(t, blob.Options{MaxSize: maxSize, InlineLimit: 16, ChunkSize: 1000})
	ctx := t.Context()
	value := bytes.Repeat([]byte("0123456789"), 1000)
	u, err := s.BeginUpload(ctx, blob.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := u.Append(ctx, bytes.NewReader(value[:3000])); err != nil || n != 3000 {
		t.Fatalf("Append within MaxSize = %d, %v", n, err)
	}
	n, err := u.Append(ctx, bytes.NewReader(value[3000:6000]))
	if !errors.Is(err, steaderr.ErrTooLarge) || n != 2000 || u.Size() != maxSize {
		t.Fatalf("Append past MaxSize = %d, %v, size %d; want the 2000 bytes to MaxSize kept and ErrTooLarge", n, err, u.Size())
	}
	if n, err := u.Append(ctx, bytes.NewReader(value[:1])); !errors.Is(err, steaderr.ErrTooLarge) || n != 0 {
		t.Fatalf("Append of a byte to a full upload = %d, %v; want 0, ErrTooLarge", n, err)
	}
	if n, err := u.Append(ctx, bytes.NewReader(nil)); err != nil || n != 0 {
		t.Fatalf("Append of nothing to a full upload = %d, %v; want 0, nil", n, err)
	}
	key, err := u.Commit(ctx, blob.CommitOptions{})
	if err != nil || key != blob.KeyOf(value[:maxSize]) {
		t.Fatalf("Commit of a full upload = %s, %v; want the first %d bytes' key", key, err, maxSize)
	}
}

// TestUploadEnded: Abort is idempotent, after a Commit too (the committed
// value stays), and an ended Upload takes no Append or Commit (ErrLost),
// nor is its ID resumed.
func TestUploadEnded(t *testing.T) {
	t.Parallel()
	s, _ := uploadStore(t, blob.Options{InlineLimit: 16, ChunkSize: 1000})
	ctx := t.Context()
	value := bytes.Repeat([]byte("ended "), 500)
	committed, err := s.BeginUpload(ctx, blob.UploadOptions{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := committed.Append(ctx, bytes.NewReader(value)); err != nil {
		t.Fatal(err)
	}
	key, err := committed.Commit(ctx, blob.CommitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	aborted, err := s.BeginUpload(ctx, blob.UploadOptions{Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := aborted.Append(ctx, bytes.NewReader(value)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		for _, u := range []*blob.Upload{committed, aborted} {
			if err := u.Abort(ctx); err != nil {
				t.Fatalf("Abort: %v", err)
			}
		}
	}
	for name, u := range map[string]*blob.Upload{"committed": committed, "aborted": aborted} {
		if _, err := u.Append(ctx, strings.NewReader("more")); !errors.Is(err, steaderr.ErrLost) {
			t.Errorf("Append to a %s upload = %v, want ErrLost", name, err)
		}
		if _, err := u.Commit(ctx, blob.CommitOptions{}); !errors.Is(err, steaderr.ErrLost) {
			t.Errorf("Commit of a %s upload = %v, want ErrLost", name, err)
		}
		if _, err := s.ResumeUpload(ctx, u.ID(), blob.UploadOptions{Owner: "o"}); !errors.Is(err, steaderr.ErrLost) {
			t.Errorf("ResumeUpload of a %s upload = %v, want ErrLost", name, err)
		}
	}
	rd, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("Get of the committed value after Aborts: %v", err)
	}
	rd.Close()
}

// TestUploadID: an ID is 16 lowercase hex digits, distinct per upload,
// and a resumed Upload has its upload's.
func TestUploadID(t *testing.T) {
	t.Parallel()
	s, _ := uploadStore(t, blob.Options{})
	ctx := t.Context()
	hex16 := regexp.MustCompile(`^[0-9a-f]{16}$`)
	seen := map[string]bool{}
	for range 100 {
		u, err := s.BeginUpload(ctx, blob.UploadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		id := u.ID()
		if !hex16.MatchString(id) || id == "0000000000000000" || id[0] > '7' || seen[id] {
			t.Fatalf("upload ID %q: want 16 lowercase hex digits of a positive int64, not drawn before", id)
		}
		seen[id] = true
		v, err := s.ResumeUpload(ctx, id, blob.UploadOptions{})
		if err != nil || v.ID() != id {
			t.Fatalf("ResumeUpload(%s) = %v, %v", id, v, err)
		}
	}
}

// TestUploadSum: an Upload's Sum is the key of its bytes so far, the
// empty value's before any, and a resumed Upload's is its upload's.
func TestUploadSum(t *testing.T) {
	t.Parallel()
	s, _ := uploadStore(t, blob.Options{})
	ctx := t.Context()
	u, err := s.BeginUpload(ctx, blob.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := u.Sum(); got != blob.KeyOf(nil) {
		t.Fatalf("Sum of an empty upload = %s", got)
	}
	if _, err := u.Append(ctx, strings.NewReader("some bytes")); err != nil {
		t.Fatal(err)
	}
	v, err := s.ResumeUpload(ctx, u.ID(), blob.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := blob.KeyOf([]byte("some bytes"))
	if u.Sum() != want || v.Sum() != want {
		t.Fatalf("Sum = %s, resumed %s; want %s", u.Sum(), v.Sum(), want)
	}
	if k, err := v.Commit(ctx, blob.CommitOptions{}); err != nil || k != want {
		t.Fatalf("Commit = %s, %v; want %s", k, err, want)
	}
}

// TestUploadConcurrentUse appends to and commits one Upload from many
// goroutines at once (run with -race): the steps serialize, the commit
// stores exactly the appends before it, each whole, and every later step
// is ErrLost.
func TestUploadConcurrentUse(t *testing.T) {
	t.Parallel()
	for _, opts := range []blob.Options{{InlineLimit: 16, ChunkSize: 100}, {}} {
		s, _ := uploadStore(t, opts)
		ctx := t.Context()
		u, err := s.BeginUpload(ctx, blob.UploadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		const writers = 8
		parts := make([][]byte, writers)
		errs := make([]error, writers)
		var key blob.Key
		var commitErr error
		var wg sync.WaitGroup
		for i := range parts {
			parts[i] = bytes.Repeat([]byte{byte('a' + i)}, 150+i)
			wg.Go(func() {
				_, errs[i] = u.Append(ctx, bytes.NewReader(parts[i]))
				_ = u.Size()
			})
			if i == writers/2 {
				wg.Go(func() { key, commitErr = u.Commit(ctx, blob.CommitOptions{}) })
			}
		}
		wg.Wait()
		if commitErr != nil {
			t.Fatalf("Commit racing appends: %v", commitErr)
		}
		rd, err := s.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if _, err := got.ReadFrom(rd); err != nil {
			t.Fatal(err)
		}
		rd.Close()
		// The value is the parts appended before the commit, each whole,
		// in some order; the others were refused.
		stored := got.Bytes()
		for len(stored) > 0 {
			i := int(stored[0] - 'a')
			if i < 0 || i >= writers || !bytes.HasPrefix(stored, parts[i]) || errs[i] != nil {
				t.Fatalf("the committed value holds %q…, not a whole part whose append succeeded", stored[:min(len(stored), 20)])
			}
			stored = stored[len(parts[i]):]
			parts[i] = nil
		}
		for i, p := range parts {
			if p != nil && !errors.Is(errs[i], steaderr.ErrLost) {
				t.Errorf("append %d, not in the committed value: %v, want ErrLost", i, errs[i])
			}
		}
		if _, err := u.Append(ctx, strings.NewReader("after")); !errors.Is(err, steaderr.ErrLost) {
			t.Fatalf("Append after the Commit = %v, want ErrLost", err)
		}
	}
}

// TestUploadAbortCancelled: an Abort whose context is done fails with its
// error, and the upload is then left to its lease.
func TestUploadAbortCancelled(t *testing.T) {
	t.Parallel()
	s, _ := uploadStore(t, blob.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	u, err := s.BeginUpload(ctx, blob.UploadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := u.Abort(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Abort with a cancelled context = %v, want context.Canceled", err)
	}
	if _, err := s.ResumeUpload(t.Context(), u.ID(), blob.UploadOptions{}); err != nil {
		t.Fatalf("ResumeUpload after a cancelled Abort: %v, want the upload still there", err)
	}
}
