package enginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/enginetest/faultengine"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/steaderr"
)

// uploadOpts are the store options of the upload tests: a tiny inline
// limit and chunk, so that an upload of a few thousand bytes is several
// chunks (on a bytes tier, rows and then objects).
var uploadOpts = blob.Options{InlineLimit: tinyInline, ChunkSize: 1000, UploadLease: time.Minute}

// testUploadStore holds the rules of the portable Upload over an engine:
// two Stores over one engine stand for two servers over one database.
func testUploadStore() []suiteTest {
	return []suiteTest{
		{"StatusRoundTrip", uploadStatusRoundTrip},
		{"AppendRaceModel", uploadAppendRaceModel},
		{"Resume", uploadResume},
		{"ResumeLost", uploadResumeLost},
		{"CommitExpect", uploadCommitExpect},
		{"CommitInline", uploadCommitInline},
		{"CommitConflict", uploadCommitConflict},
		{"StoreRace", uploadStoreRace},
		{"StaleAfterFault", uploadStaleAfterFault},
		{"Lapsed", uploadLapsed},
		{"Cancelled", uploadCancelled},
		{"PoolOfOne", uploadPoolOfOne},
		{"Metamorphic", uploadMetamorphic},
	}
}

// secondStore returns another Store over b's engine, on b's clock, with
// opts: another server over the same database.
func secondStore(b *bundle, opts blob.Options) *blob.Store {
	opts.Now = b.clock.Now
	return blob.NewStore(b.blobs, opts)
}

// mustAppend appends data to u, which must take it whole.
func mustAppend(t *testing.T, u *blob.Upload, data []byte) {
	t.Helper()
	before := u.Size()
	n, err := u.Append(t.Context(), bytes.NewReader(data))
	if err != nil || n != int64(len(data)) {
		t.Fatalf("Append of %d bytes at %d = %d, %v", len(data), before, n, err)
	}
	if got := u.Size(); got != before+int64(len(data)) {
		t.Fatalf("Size after an append of %d bytes at %d = %d", len(data), before, got)
	}
}

// mustBegin begins an upload on s owned by owner.
func mustBegin(t *testing.T, s *blob.Store, owner string) *blob.Upload {
	t.Helper()
	u, err := s.BeginUpload(t.Context(), blob.UploadOptions{Owner: owner})
	if err != nil {
		t.Fatalf("BeginUpload(owner %q): %v", owner, err)
	}
	return u
}

// mustResume resumes the upload id on s as owner, which must hold size
// bytes.
func mustResume(t *testing.T, s *blob.Store, id, owner string, size int64) *blob.Upload {
	t.Helper()
	u, err := s.ResumeUpload(t.Context(), id, blob.UploadOptions{Owner: owner})
	if err != nil {
		t.Fatalf("ResumeUpload(%s, owner %q): %v", id, owner, err)
	}
	if u.ID() != id || u.Size() != size {
		t.Fatalf("ResumeUpload(%s) = upload %s of %d bytes, want %d", id, u.ID(), u.Size(), size)
	}
	return u
}

// mustCommit commits u, which must store want under its key.
func mustCommit(t *testing.T, b *bundle, u *blob.Upload, want []byte) blob.Key {
	t.Helper()
	key, err := u.Commit(t.Context(), blob.CommitOptions{})
	if err != nil {
		t.Fatalf("Commit of %d bytes: %v", len(want), err)
	}
	if key != blob.KeyOf(want) {
		t.Fatalf("Commit = %s, want the key of the %d bytes appended, %s", key, len(want), blob.KeyOf(want))
	}
	wantValue(t, b.store, key, want)
	if got := engineValue(t, b.blobs, key); !bytes.Equal(got, want) {
		t.Fatalf("engine reads %d bytes under %s, want %d", len(got), key, len(want))
	}
	return key
}

// maxOwner is an upload owner of MaxUploadOwner bytes of UTF-8, with
// characters of one to four bytes.
func maxOwner() string {
	var sb strings.Builder
	for _, r := range strings.Repeat("repo/é仓🦀", blob.MaxUploadOwner) {
		if sb.Len()+len(string(r)) > blob.MaxUploadOwner {
			break
		}
		sb.WriteRune(r)
	}
	for sb.Len() < blob.MaxUploadOwner {
		sb.WriteByte('x')
	}
	return sb.String()
}

// everyByte returns n bytes cycling through every byte value from start.
func everyByte(n int, start byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = start + byte(i)
	}
	return p
}

// uploadStatusRoundTrip checks that an upload's owner, size and state
// come back from UploadStatus byte for byte after BeginUpload and after
// each append, at the bounds too (an owner of MaxUploadOwner bytes of
// UTF-8, a state of MaxUploadState bytes of every value, an empty one, a
// short one after a long one), and that uploads keep their own.
func uploadStatusRoundTrip(t *testing.T, h Harness) {
	b := setup(t, h)
	eng, ctx := b.blobs, t.Context()
	owner := maxOwner()
	if len(owner) != blob.MaxUploadOwner {
		t.Fatalf("test owner of %d bytes, want %d", len(owner), blob.MaxUploadOwner)
	}
	begin := everyByte(blob.MaxUploadState, 0)
	set, err := eng.BeginUpload(ctx, blob.BeginUploadParams{Owner: owner, State: begin, Lease: time.Minute})
	if err != nil {
		t.Fatalf("BeginUpload: %v", err)
	}
	other, err := eng.BeginUpload(ctx, blob.BeginUploadParams{State: []byte("other"), Lease: time.Minute})
	if err != nil {
		t.Fatalf("BeginUpload: %v", err)
	}
	wantStatus(t, eng, set, owner, 0, begin)
	wantStatus(t, eng, other, "", 0, []byte("other"))
	var size int64
	for i, state := range [][]byte{everyByte(blob.MaxUploadState, 7), {}, {0}, everyByte(100, 200), everyByte(blob.MaxUploadState, 255), []byte("short")} {
		data := testValue(fmt.Sprint("status ", i), 1+i*300)
		if err := eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: size, Data: data, State: state, Lease: time.Minute}); err != nil {
			t.Fatalf("WriteChunk %d at %d: %v", i, size, err)
		}
		size += int64(len(data))
		wantStatus(t, eng, set, owner, size, state)
	}
	wantStatus(t, eng, other, "", 0, []byte("other"))

	// Through the Store: the owner checks out, the size is the engine's.
	s := secondStore(b, uploadOpts)
	u, err := s.BeginUpload(ctx, blob.UploadOptions{Owner: owner})
	if err != nil {
		t.Fatalf("Store.BeginUpload with an owner of %d bytes: %v", len(owner), err)
	}
	value := testValue("status through the store", 2500)
	mustAppend(t, u, value)
	st, err := eng.UploadStatus(ctx, uploadSet(t, u))
	if err != nil || st.Owner != owner || st.Size != int64(len(value)) || len(st.State) == 0 || len(st.State) > blob.MaxUploadState {
		t.Fatalf("UploadStatus of a Store's upload = owner of %d bytes, size %d, state of %d bytes, %v; want its owner, %d bytes and a state", len(st.Owner), st.Size, len(st.State), err, len(value))
	}
	mustResume(t, b.store, u.ID(), owner, int64(len(value)))
}

// uploadAppendRaceModel races two appends at the end of one upload, round
// after round, against a model of it: each round exactly one commits and
// the other is refused with ErrConflict, the status is the winner's (its
// size and state), and the published value is the winners' bytes in
// order, each winner's one chunk.
func uploadAppendRaceModel(t *testing.T, h Harness) {
	const rounds = 40
	b := setup(t, h)
	eng, ctx := b.blobs, t.Context()
	rng := rand.New(rand.NewPCG(25, 45))
	set, err := eng.BeginUpload(ctx, blob.BeginUploadParams{State: uploadState(0), Lease: time.Minute})
	if err != nil {
		t.Fatalf("BeginUpload: %v", err)
	}
	var model []byte
	var starts []int64
	for round := range rounds {
		off := int64(len(model))
		var data [2][]byte
		var states [2][]byte
		for i := range data {
			data[i] = testValue(fmt.Sprint("race model ", round, " ", i), 1+rng.IntN(3000))
			states[i] = fmt.Appendf(nil, "round %d writer %d", round, i)
		}
		var errs [2]error
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				errs[i] = eng.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Off: off, Data: data[i], State: states[i], Lease: time.Minute})
			})
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: both appends at %d committed", round, off)
			case err == nil:
				winner = i
			case !errors.Is(err, steaderr.ErrConflict):
				t.Fatalf("round %d: racing append %d at %d: %v, want nil or ErrConflict", round, i, off, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: neither racing append at %d committed: %v", round, off, errs)
		}
		model = append(model, data[winner]...)
		starts = append(starts, off)
		wantStatus(t, eng, set, "", int64(len(model)), states[winner])
	}
	for i, start := range starts {
		end := int64(len(model))
		if i+1 < len(starts) {
			end = starts[i+1]
		}
		wantChunk(t, eng, set, start, model, start, int(end-start))
	}
	key := blob.KeyOf(model)
	if _, err := eng.Put(ctx, blob.PutParams{Key: key, Chunks: set, Size: int64(len(model)), Owner: "racer", TTL: time.Minute}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	wantValue(t, b.store, key, model)
}

// uploadResume checks that an upload begun through one Store is continued
// and committed through another over the same engine (another server over
// the same database), by its ID and owner, which is 16 hex digits.
func uploadResume(t *testing.T, h Harness) {
	b := setupWith(t, h, uploadOpts)
	other := secondStore(b, uploadOpts)
	for _, owner := range []string{"", "library/ubuntu", maxOwner()} {
		u := mustBegin(t, b.store, owner)
		id := u.ID()
		uploadSet(t, u) // 16 hex digits
		first := testValue("resume first "+owner, 2500)
		mustAppend(t, u, first)
		// A Store that never saw the upload continues it.
		v := mustResume(t, other, id, owner, int64(len(first)))
		second := testValue("resume second "+owner, 1700)
		mustAppend(t, v, second)
		// And a third picks it up again, with nothing appended.
		w := mustResume(t, secondStore(b, uploadOpts), id, owner, int64(len(first)+len(second)))
		mustCommit(t, b, w, append(bytes.Clone(first), second...))
		_, err := other.ResumeUpload(t.Context(), id, blob.UploadOptions{Owner: owner})
		wantErr(t, err, steaderr.ErrLost, "ResumeUpload of a committed upload")
	}
	// Empty appends change nothing, and an empty upload commits as the
	// empty value.
	u := mustBegin(t, b.store, "empty")
	mustAppend(t, u, nil)
	v := mustResume(t, other, u.ID(), "empty", 0)
	mustAppend(t, v, nil)
	mustCommit(t, b, v, nil)
}

// uploadResumeLost checks that ResumeUpload of an upload not to be had (a
// malformed ID, one never begun, another owner's, one committed, aborted
// or reaped) is ErrLost with the same message whatever the reason, so
// that the answer tells nothing of another owner's upload.
func uploadResumeLost(t *testing.T, h Harness) {
	b := setupWith(t, h, uploadOpts)
	ctx := t.Context()
	other := secondStore(b, uploadOpts)
	live := mustBegin(t, b.store, "library/live")
	mustAppend(t, live, testValue("live", 100))
	committed := mustBegin(t, b.store, "library/committed")
	mustAppend(t, committed, testValue("committed", 100))
	if _, err := committed.Commit(ctx, blob.CommitOptions{}); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	aborted := mustBegin(t, b.store, "library/aborted")
	mustAppend(t, aborted, testValue("aborted", 2000))
	if err := aborted.Abort(ctx); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	never := fmt.Sprintf("%016x", uint64(uploadSet(t, live))^0x0123456789abcdef) // both below 2^63
	type attempt struct{ what, id, owner string }
	attempts := []attempt{
		{"another owner", live.ID(), "library/other"},
		{"the empty owner for an owned upload", live.ID(), ""},
		{"an owner one byte longer", live.ID(), "library/live/"},
		{"a committed upload", committed.ID(), "library/committed"},
		{"an aborted upload", aborted.ID(), "library/aborted"},
		{"an upload never begun", never, "library/live"},
	}
	for _, id := range []string{"", "0", "0000000000000000", "8000000000000000", "ffffffffffffffff", "-000000000000001", "+000000000000001",
		live.ID() + "0", live.ID()[1:], " " + live.ID()[1:], "xyz", "000000000000000g", strings.Repeat("1", 100), "../../etc/passwd"} {
		attempts = append(attempts, attempt{"malformed id " + id, id, "library/live"})
	}
	var class string
	for _, a := range attempts {
		_, err := other.ResumeUpload(ctx, a.id, blob.UploadOptions{Owner: a.owner})
		wantErr(t, err, steaderr.ErrLost, "ResumeUpload of "+a.what)
		// The message past the id is the same for each.
		_, rest, _ := strings.Cut(err.Error(), ": ")
		if class == "" {
			class = rest
		} else if rest != class {
			t.Errorf("ResumeUpload of %s says %q, of the first %q: want the same answer", a.what, rest, class)
		}
	}
	// The live upload is untouched by the attempts.
	v := mustResume(t, other, live.ID(), "library/live", 100)
	mustCommit(t, b, v, testValue("live", 100))
}

// uploadCommitExpect checks that a Commit whose Expect is not the key of
// the upload's bytes is ErrDigestMismatch and stores nothing, the upload
// left to continue (through this Upload or another) and commit rightly.
func uploadCommitExpect(t *testing.T, h Harness) {
	b := setupWith(t, h, uploadOpts)
	ctx := t.Context()
	for _, size := range []int{10, 3000} {
		value := testValue(fmt.Sprint("commit expect ", size), size)
		u := mustBegin(t, b.store, "expect")
		mustAppend(t, u, value[:size/2])
		_, err := u.Commit(ctx, blob.CommitOptions{Expect: blob.KeyOf(value)})
		wantErr(t, err, steaderr.ErrDigestMismatch, "Commit of half the value expecting the whole's key")
		wantHas(t, b.store, blob.KeyOf(value), false)
		wantHas(t, b.store, blob.KeyOf(value[:size/2]), false)
		mustResume(t, secondStore(b, uploadOpts), u.ID(), "expect", int64(size/2))
		mustAppend(t, u, value[size/2:])
		v := mustResume(t, secondStore(b, uploadOpts), u.ID(), "expect", int64(size))
		key, err := v.Commit(ctx, blob.CommitOptions{Expect: blob.KeyOf(value)})
		if err != nil || key != blob.KeyOf(value) {
			t.Fatalf("Commit after the mismatch, the rest appended = %s, %v; want %s", key, err, blob.KeyOf(value))
		}
		wantValue(t, b.store, key, value)
	}
}

// uploadCommitInline checks that a commit of at most the store's inline
// limit stores the value inline, in its blob row, however many chunks it
// was appended in, and one past it does not; a committed upload is ended.
func uploadCommitInline(t *testing.T, h Harness) {
	const inline = 1000
	opts := blob.Options{InlineLimit: inline, ChunkSize: 100}
	b := setupWith(t, h, opts)
	ctx := t.Context()
	for _, size := range []int{0, 1, 99, 100, 101, inline - 1, inline, inline + 1, 3 * inline} {
		value := testValue(fmt.Sprint("commit inline ", size), size)
		u := mustBegin(t, b.store, "inline")
		for off := 0; off < size; off += 150 {
			mustAppend(t, u, value[off:min(off+150, size)])
		}
		key := mustCommit(t, b, u, value)
		st, err := b.blobs.Get(ctx, key)
		if err != nil {
			t.Fatalf("engine Get: %v", err)
		}
		if st.Inline() != (size <= inline) || st.Size != int64(size) {
			t.Fatalf("a commit of %d bytes (inline limit %d) is stored inline %v, size %d; want inline %v", size, inline, st.Inline(), st.Size, size <= inline)
		}
		_, err = b.store.ResumeUpload(ctx, u.ID(), blob.UploadOptions{Owner: "inline"})
		wantErr(t, err, steaderr.ErrLost, "ResumeUpload of a committed upload")
		_, err = u.Append(ctx, bytes.NewReader([]byte("more")))
		wantErr(t, err, steaderr.ErrLost, "Append to a committed upload")
		_, err = u.Commit(ctx, blob.CommitOptions{})
		wantErr(t, err, steaderr.ErrLost, "Commit of a committed upload")
	}
}

// uploadCommitConflict checks that an Upload that missed another's append
// (another server continued the upload) neither appends nor commits: each
// is ErrConflict and stores nothing, and the step after re-reads the
// upload and goes on from its end.
func uploadCommitConflict(t *testing.T, h Harness) {
	b := setupWith(t, h, uploadOpts)
	ctx := t.Context()
	other := secondStore(b, uploadOpts)
	for _, size := range []int{5, 10, 2500} { // within and past the inline limit
		value := testValue(fmt.Sprint("commit conflict ", size), 3*size)
		a := mustBegin(t, b.store, "conflict")
		mustAppend(t, a, value[:size])
		bb := mustResume(t, other, a.ID(), "conflict", int64(size))
		mustAppend(t, bb, value[size:2*size])
		_, err := a.Commit(ctx, blob.CommitOptions{})
		wantErr(t, err, steaderr.ErrConflict, fmt.Sprintf("Commit of %d bytes after another appended %d", size, size))
		wantHas(t, b.store, blob.KeyOf(value[:size]), false)
		wantHas(t, b.store, blob.KeyOf(value[:2*size]), false)
		// a re-reads the upload and goes on from its end; bb does not
		// know of that append: its own is refused.
		if n, err := a.Append(ctx, bytes.NewReader(value[2*size:])); err != nil || n != int64(size) || a.Size() != int64(3*size) {
			t.Fatalf("Append after the conflict = %d, %v, size %d; want %d taken after the other's, size %d", n, err, a.Size(), size, 3*size)
		}
		_, err = bb.Append(ctx, bytes.NewReader([]byte("late")))
		wantErr(t, err, steaderr.ErrConflict, "Append through an Upload that missed another's append")
		mustResume(t, other, a.ID(), "conflict", int64(3*size))
		mustCommit(t, b, bb, value)
		_, err = a.Commit(ctx, blob.CommitOptions{})
		wantErr(t, err, steaderr.ErrLost, "Commit of an upload another Upload committed")
	}
}

// uploadStoreRace races appends through two Uploads of one upload (two
// servers), round after round, against a model: exactly one commits each
// round and the other is ErrConflict; the loser's next step re-reads the
// upload, and the committed value is the winners' bytes in order.
func uploadStoreRace(t *testing.T, h Harness) {
	const rounds = 25
	b := setupWith(t, h, uploadOpts)
	ctx := t.Context()
	rng := rand.New(rand.NewPCG(25, 3))
	ups := [2]*blob.Upload{mustBegin(t, b.store, "race")}
	ups[1] = mustResume(t, secondStore(b, uploadOpts), ups[0].ID(), "race", 0)
	var model []byte
	for round := range rounds {
		var data [2][]byte
		for i := range data {
			// Up to a chunk: an append of one chunk commits whole or not.
			data[i] = testValue(fmt.Sprint("store race ", round, " ", i), 1+rng.IntN(1000))
		}
		var ns [2]int64
		var errs [2]error
		var wg sync.WaitGroup
		for i := range ups {
			wg.Go(func() { ns[i], errs[i] = ups[i].Append(ctx, bytes.NewReader(data[i])) })
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: both appends at %d committed", round, len(model))
			case err == nil && ns[i] == int64(len(data[i])):
				winner = i
			case err == nil:
				t.Fatalf("round %d: Append %d took %d of %d bytes", round, i, ns[i], len(data[i]))
			case !errors.Is(err, steaderr.ErrConflict) || ns[i] != 0:
				t.Fatalf("round %d: racing Append %d = %d, %v; want nil or ErrConflict having taken nothing", round, i, ns[i], err)
			}
		}
		if winner < 0 {
			// Both may lose only when each saw the other's append: neither
			// did here, as both started at the model's end.
			t.Fatalf("round %d: neither racing append at %d committed: %v", round, len(model), errs)
		}
		model = append(model, data[winner]...)
		loser := ups[1-winner]
		if _, err := loser.Append(ctx, bytes.NewReader(nil)); err != nil || loser.Size() != int64(len(model)) {
			t.Fatalf("round %d: the loser's next step = size %d, %v; want the upload's %d", round, loser.Size(), err, len(model))
		}
	}
	mustCommit(t, b, ups[rng.IntN(2)], model)
}

// uploadStaleAfterFault fails appends after they committed (the answer
// lost on the way back, as a connection cut or a server killed after its
// commit would): the Upload then knows not where the upload ends, and its
// next step re-reads it and goes on from there, so the committed value
// holds every committed byte once.
func uploadStaleAfterFault(t *testing.T, h Harness) {
	b := setupWith(t, h, uploadOpts)
	ctx := t.Context()
	var sw faultengine.Switch
	s := blob.NewStore(faultengine.New(b.eng, &sw).Blobs(), blob.Options{InlineLimit: uploadOpts.InlineLimit, ChunkSize: uploadOpts.ChunkSize, Now: b.clock.Now})
	for _, next := range []string{"Append", "Commit", "Resume"} {
		t.Run(next, func(t *testing.T) {
			value := testValue("stale after fault "+next, 4000)
			u := mustBegin(t, s, "stale")
			mustAppend(t, u, value[:10]) // rows, within the inline limit
			op := faultengine.BlobWriteChunk
			if b.blobs.Tiered() {
				op = faultengine.BlobWriteValue // past the inline limit: an object chunk
			}
			sw.FailNextAfter(op, 1)
			n, err := u.Append(ctx, bytes.NewReader(value[10:2000]))
			sw.Heal(op)
			wantErr(t, err, faultengine.ErrInjected, "Append failed after its write committed")
			if n >= 1990 {
				t.Fatalf("an Append whose last write failed reports %d of 1990 bytes taken", n)
			}
			committed := int64(2000)
			if !b.blobs.Tiered() {
				// Chunk by chunk: the one write that failed is the last.
				committed = 10 + n + min(1990-n, int64(uploadOpts.ChunkSize))
			}
			switch next {
			case "Append":
				if n, err := u.Append(ctx, bytes.NewReader(nil)); err != nil || n != 0 || u.Size() != committed {
					t.Fatalf("the step after the failed append = %d, %v, size %d; want the %d bytes committed", n, err, u.Size(), committed)
				}
				mustAppend(t, u, value[committed:])
				mustCommit(t, b, u, value)
			case "Commit":
				mustCommit(t, b, u, value[:committed])
			case "Resume":
				v := mustResume(t, s, u.ID(), "stale", committed)
				mustAppend(t, v, value[committed:])
				mustCommit(t, b, v, value)
			}
		})
	}
}

// uploadLapsed checks that an upload nobody appended to for its lease is
// reaped (on the store's clock), and then not to be had: its ID is
// ErrLost to ResumeUpload, and an Upload of it fails Append and Commit
// with ErrLost; an append renews the lease.
func uploadLapsed(t *testing.T, h Harness) {
	b := setupWith(t, h, uploadOpts)
	ctx := t.Context()
	renewed := mustBegin(t, b.store, "lapsed")
	lapsing := mustBegin(t, b.store, "lapsed")
	lapsingBig := mustBegin(t, b.store, "lapsed")
	mustAppend(t, renewed, testValue("renewed", 100))
	mustAppend(t, lapsing, testValue("lapsing", 10))
	mustAppend(t, lapsingBig, testValue("lapsing big", 3000))
	b.clock.Advance(40 * time.Second)
	mustAppend(t, renewed, testValue("renewed again", 100))
	b.clock.Advance(40 * time.Second) // the lapsing ones' leases ended 20s ago
	if n, err := b.store.ReapUploads(ctx); err != nil || n != 2 {
		t.Fatalf("ReapUploads = %d, %v; want the 2 lapsed uploads", n, err)
	}
	for _, u := range []*blob.Upload{lapsing, lapsingBig} {
		_, err := b.store.ResumeUpload(ctx, u.ID(), blob.UploadOptions{Owner: "lapsed"})
		wantErr(t, err, steaderr.ErrLost, "ResumeUpload of a reaped upload")
		_, err = u.Commit(ctx, blob.CommitOptions{})
		wantErr(t, err, steaderr.ErrLost, fmt.Sprintf("Commit of a reaped upload of %d bytes", u.Size()))
		_, err = u.Append(ctx, bytes.NewReader(testValue("late", 3000)))
		wantErr(t, err, steaderr.ErrLost, "Append to a reaped upload")
		wantNoUpload(t, b.blobs, uploadSet(t, u), "a reaped upload")
	}
	v := mustResume(t, secondStore(b, uploadOpts), renewed.ID(), "lapsed", 200)
	mustCommit(t, b, v, append(testValue("renewed", 100), testValue("renewed again", 100)...))
}

// uploadCancelled checks that a call whose context ended before it began
// changes nothing, on the seam and through the Store.
func uploadCancelled(t *testing.T, h Harness) {
	b := setupWith(t, h, uploadOpts)
	done := cancelled(t)
	eng := b.blobs
	value := testValue("cancelled", 3000)
	set := stageChunks(t, eng, value[:1000], 1000)
	if _, err := eng.BeginUpload(done, blob.BeginUploadParams{State: uploadState(0), Lease: time.Minute}); !errors.Is(err, context.Canceled) {
		t.Fatalf("BeginUpload with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := eng.UploadStatus(done, set); !errors.Is(err, context.Canceled) {
		t.Fatalf("UploadStatus with a cancelled context: %v, want context.Canceled", err)
	}
	if err := appendChunk(done, eng, set, 1000, value[1000:2000]); !errors.Is(err, context.Canceled) {
		t.Fatalf("WriteChunk with a cancelled context: %v, want context.Canceled", err)
	}
	wantStatus(t, eng, set, "", 1000, uploadState(1000))
	if _, err := eng.Put(done, blob.PutParams{Key: blob.KeyOf(value[:1000]), Chunks: set, Size: 1000, Owner: "cancelled", TTL: time.Minute}); !errors.Is(err, context.Canceled) {
		t.Fatalf("publish with a cancelled context: %v, want context.Canceled", err)
	}
	if err := eng.AbortUpload(done, set); !errors.Is(err, context.Canceled) {
		t.Fatalf("AbortUpload with a cancelled context: %v, want context.Canceled", err)
	}
	wantStatus(t, eng, set, "", 1000, uploadState(1000))
	wantHas(t, b.store, blob.KeyOf(value[:1000]), false)

	if _, err := b.store.BeginUpload(done, blob.UploadOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Store.BeginUpload with a cancelled context: %v, want context.Canceled", err)
	}
	u := mustBegin(t, b.store, "cancelled")
	mustAppend(t, u, value[:1500])
	if _, err := b.store.ResumeUpload(done, u.ID(), blob.UploadOptions{Owner: "cancelled"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("ResumeUpload with a cancelled context: %v, want context.Canceled", err)
	}
	if n, err := u.Append(done, bytes.NewReader(value[1500:])); !errors.Is(err, context.Canceled) || n != 0 {
		t.Fatalf("Append with a cancelled context = %d, %v; want 0, context.Canceled", n, err)
	}
	if _, err := u.Commit(done, blob.CommitOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit with a cancelled context: %v, want context.Canceled", err)
	}
	wantHas(t, b.store, blob.KeyOf(value[:1500]), false)
	mustResume(t, secondStore(b, uploadOpts), u.ID(), "cancelled", 1500)
	mustAppend(t, u, value[1500:])
	mustCommit(t, b, u, value)
}

// stallingReader yields head, then waits for release (or for ctx to end:
// then it fails with ctx's error), then yields tail: a client sending an
// upload's bytes slowly.
type stallingReader struct {
	ctx        context.Context
	head, tail []byte
	stalled    chan struct{} // closed once head is read
	release    chan struct{}
	once       sync.Once
}

func (r *stallingReader) Read(p []byte) (int, error) {
	if len(r.head) > 0 {
		n := copy(p, r.head)
		r.head = r.head[n:]
		return n, nil
	}
	r.once.Do(func() { close(r.stalled) })
	select {
	case <-r.release:
	case <-r.ctx.Done():
		return 0, r.ctx.Err()
	}
	if len(r.tail) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.tail)
	r.tail = r.tail[n:]
	return n, nil
}

// uploadPoolOfOne runs uploads over an engine whose pool holds one
// connection (Harness.OneConn): while one Append waits for its source
// mid-way (within the inline limit and past it, where on a tier it
// streams an object), other uploads begin, append, resume, race and
// commit, and values are read; then the stalled one completes. A call
// that held the only connection while it waited would stall them all.
func uploadPoolOfOne(t *testing.T, h Harness) {
	if h.OneConn == nil {
		t.Skip("the harness has no engine with a pool of one connection (Harness.OneConn)")
	}
	eng := h.OneConn(t)
	if eng == nil {
		t.Fatal("enginetest: Harness.OneConn returned nil")
	}
	b := bundleOf(t, eng, uploadOpts)
	other := secondStore(b, uploadOpts)
	for _, at := range []int{8, 3000} { // where the source stalls
		t.Run(fmt.Sprint("StalledAt", at), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), testkit.Timeout)
			defer cancel()
			value := testValue(fmt.Sprint("pool of one ", at), 6000)
			slow := mustBegin(t, b.store, "slow")
			src := &stallingReader{ctx: ctx, head: value[:at], tail: value[at:], stalled: make(chan struct{}), release: make(chan struct{})}
			var n int64
			var err error
			done := make(chan struct{})
			go func() {
				defer close(done)
				n, err = slow.Append(ctx, src)
			}()
			select {
			case <-src.stalled:
			case <-done:
				t.Fatalf("Append ended before its source stalled: %d, %v", n, err)
			}
			// Meanwhile, another upload, from begin to read.
			fast := mustBegin(t, other, "fast")
			quick := testValue(fmt.Sprint("pool of one quick ", at), 4000)
			mustAppend(t, fast, quick[:2000])
			again := mustResume(t, b.store, fast.ID(), "fast", 2000)
			mustAppend(t, again, quick[2000:])
			if _, err := fast.Append(ctx, bytes.NewReader(quick)); !errors.Is(err, steaderr.ErrConflict) {
				t.Fatalf("Append through an Upload that missed another's: %v, want ErrConflict", err)
			}
			mustCommit(t, b, again, quick)
			close(src.release)
			<-done
			if err != nil || n != int64(len(value)) {
				t.Fatalf("the stalled Append = %d, %v; want all %d bytes", n, err, len(value))
			}
			mustCommit(t, b, slow, value)
		})
	}
}
