package enginetest

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/memory"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/steaderr"
)

var seedFlag = flag.Int64("enginetest.seed", 0, "seed of the metamorphic test's random operations (default: time-based)")

const (
	// metamorphicOps is the length of one random operation sequence.
	metamorphicOps = 500
	// metamorphicMaxSize is both stores' MaxSize, so that one pooled value
	// is too large.
	metamorphicMaxSize = 8 << 10
	// metamorphicCheckEvery is how often the whole contents are compared,
	// besides each operation's result.
	metamorphicCheckEvery = 50
)

// metamorphicSeed returns -enginetest.seed if it was set, else a
// time-based seed.
func metamorphicSeed() int64 {
	seed := time.Now().UnixNano()
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "enginetest.seed" {
			seed = *seedFlag
		}
	})
	return seed
}

// metamorphicStep is one operation of a metamorphic test, run on the engine
// under test and on the reference. A step with compare false (a move of the
// shared clock) is logged but not compared.
type metamorphicStep struct {
	name      string
	got, want outcome
	compare   bool
}

// runMetamorphic is the one shape of every metamorphic test (blobs, locks,
// records): n steps from step, each run on the engine and on the in-memory
// reference; their outcomes must agree, class and rendered result, and
// neither may be an unexpected error. The first difference fails t with the
// seed, the command that replays it, and the steps before it.
func runMetamorphic(t *testing.T, seed int64, n int, step func(i int) metamorphicStep) {
	t.Helper()
	replay := fmt.Sprintf("seed %d; replay with: go test ./path/to/engine -run '^%s$' -enginetest.seed=%d (flags after the package)", seed, t.Name(), seed)
	t.Log(replay)
	history := make([]string, 0, n)
	for i := range n {
		s := step(i)
		if s.compare && (s.got.class == classOther || s.want.class == classOther || s.got.class != s.want.class || s.got.out != s.want.out) {
			recent := history[max(0, len(history)-12):]
			t.Fatalf("step %d of %d: %s\n\tengine:    %v\n\treference: %v\n%s\nthe steps before it:\n\t%s",
				i, n, s.name, s.got, s.want, replay, strings.Join(recent, "\n\t"))
		}
		history = append(history, fmt.Sprintf("%d: %s -> %v", i, s.name, s.want))
	}
}

// testMetamorphic runs one seeded random sequence of blob operations
// against the engine and the in-memory reference engine, and compares every
// result; every metamorphicCheckEvery steps, and last, it compares the
// whole listing.
func testMetamorphic(t *testing.T, h Harness) {
	seed := metamorphicSeed()
	// Both stores pin on one clock; an Expire op moves it past every pin,
	// so deletes meet both protected and unprotected blobs.
	fake := clock.NewFake(wholeMicroStart)
	opts := blob.Options{MaxSize: metamorphicMaxSize, Now: fake.Now}
	subject := setupWith(t, h, opts).store
	ref := bundleOf(t, memory.New(), opts).store
	g := newGen(t, seed)
	n := metamorphicOps + metamorphicOps/metamorphicCheckEvery + 1
	runMetamorphic(t, seed, n, func(i int) metamorphicStep {
		o := g.next()
		if (i+1)%(metamorphicCheckEvery+1) == 0 || i == n-1 {
			o = op{kind: opAll}
		}
		if o.kind == opExpire {
			fake.Advance(2 * blob.DefaultPinTTL)
			return metamorphicStep{name: o.String()}
		}
		return metamorphicStep{
			name:    o.String(),
			got:     apply(t.Context(), subject, g.pool, o),
			want:    apply(t.Context(), ref, g.pool, o),
			compare: true,
		}
	})
}

type opKind uint8

const (
	opPut opKind = iota
	opPutExpect
	opGet
	opStat
	opHas
	opDelete
	opList
	opAll
	opExpire
)

var opNames = [...]string{"Put", "PutExpect", "Get", "Stat", "Has", "Delete", "List", "All", "Expire"}

// op is one random operation.
type op struct {
	kind opKind
	// value indexes the value pool: Put, PutExpect.
	value int
	// key is PutExpect's claimed key; Get's, Stat's, Has's and Delete's
	// key; List's and All's cursor.
	key blob.Key
	// limit is List's limit, and the number of blobs after which All
	// breaks (0: never).
	limit int
}

func (o op) String() string {
	switch o.kind {
	case opPut:
		return fmt.Sprintf("Put(value %d)", o.value)
	case opPutExpect:
		return fmt.Sprintf("PutExpect(%s, value %d)", shortKey(o.key), o.value)
	case opList:
		return fmt.Sprintf("List(after %s, limit %d)", shortKey(o.key), o.limit)
	case opAll:
		return fmt.Sprintf("All(after %s, break after %d)", shortKey(o.key), o.limit)
	}
	return fmt.Sprintf("%s(%s)", opNames[o.kind], shortKey(o.key))
}

// shortKey abbreviates a key for messages.
func shortKey(k blob.Key) string {
	if k.IsZero() {
		return "zero key"
	}
	return k.String()[:len("sha256:")+12] + "…"
}

// gen generates operations.
type gen struct {
	t    *testing.T
	rng  *rand.Rand
	pool [][]byte
	keys []blob.Key // keys[i] is the key of pool[i]
}

func newGen(t *testing.T, seed int64) *gen {
	g := &gen{t: t, rng: rand.New(rand.NewPCG(uint64(seed), 0x5eed))}
	g.pool = [][]byte{{}, []byte("a"), []byte("b"), []byte("hello, stead")}
	for i, size := range []int{2, 31, 100, 256, 1000, 4096, metamorphicMaxSize} {
		g.pool = append(g.pool, testValue(fmt.Sprint("metamorphic", i), size))
	}
	// The last value is too large: its puts fail and it is never stored.
	g.pool = append(g.pool, testValue("metamorphic too large", metamorphicMaxSize+1))
	for _, v := range g.pool {
		g.keys = append(g.keys, blob.KeyOf(v))
	}
	return g
}

func (g *gen) next() op {
	switch n := g.rng.IntN(100); {
	case n < 25:
		return op{kind: opPut, value: g.value()}
	case n < 35:
		o := op{kind: opPutExpect, value: g.value()}
		switch m := g.rng.IntN(10); {
		case m < 6:
			o.key = g.keys[o.value]
		case m < 9:
			if o.key = g.keys[g.rng.IntN(len(g.keys))]; o.key == g.keys[o.value] {
				o.key = g.randomKey()
			}
		}
		return o
	case n < 50:
		return op{kind: opGet, key: g.key()}
	case n < 58:
		return op{kind: opStat, key: g.key()}
	case n < 66:
		return op{kind: opHas, key: g.key()}
	case n < 75:
		return op{kind: opDelete, key: g.key()}
	case n < 78:
		return op{kind: opExpire}
	case n < 92:
		o := op{kind: opList, key: g.cursor(), limit: 1 + g.rng.IntN(12)}
		if g.rng.IntN(20) == 0 {
			o.limit = []int{0, -1, -5}[g.rng.IntN(3)]
		}
		return o
	default:
		o := op{kind: opAll, key: g.cursor()}
		if g.rng.IntN(3) > 0 {
			o.limit = 1 + g.rng.IntN(6)
		}
		return o
	}
}

// value picks a pooled value, rarely the one that is too large.
func (g *gen) value() int {
	if g.rng.IntN(25) == 0 {
		return len(g.pool) - 1
	}
	return g.rng.IntN(len(g.pool) - 1)
}

// key picks a pooled value's key (stored or not), a random absent key or
// the zero key.
func (g *gen) key() blob.Key {
	switch n := g.rng.IntN(20); {
	case n < 15:
		return g.keys[g.rng.IntN(len(g.keys))]
	case n < 19:
		return g.randomKey()
	}
	return blob.Key{}
}

// cursor picks a List cursor: the zero key, a pooled value's key or a
// random key.
func (g *gen) cursor() blob.Key {
	switch g.rng.IntN(3) {
	case 0:
		return blob.Key{}
	case 1:
		return g.keys[g.rng.IntN(len(g.keys))]
	}
	return g.randomKey()
}

func (g *gen) randomKey() blob.Key {
	var d [32]byte
	for i := range d {
		d[i] = byte(g.rng.Uint32())
	}
	return keyOfDigest(g.t, d)
}

// Error classes: results are compared by class, not by message.
const (
	classOK              = "ok"
	classNotFound        = "ErrNotFound"
	classDigestMismatch  = "ErrDigestMismatch"
	classInvalidKey      = "ErrInvalidKey"
	classInvalidArgument = "ErrInvalidArgument"
	classTooLarge        = "ErrTooLarge"
	classConflict        = "ErrConflict"
	classWrongGroup      = "ErrWrongGroup"
	classUnknownGroup    = "ErrUnknownGroup"
	classLeased          = "ErrLeased"
	classInvalidName     = "ErrInvalidName"
	classProtected       = "ErrProtected"
	classLost            = "ErrLost"
	classOther           = "other error"
)

func errClass(err error) string {
	switch {
	case err == nil:
		return classOK
	case errors.Is(err, steaderr.ErrNotFound):
		return classNotFound
	case errors.Is(err, steaderr.ErrProtected):
		return classProtected
	case errors.Is(err, steaderr.ErrDigestMismatch):
		return classDigestMismatch
	case errors.Is(err, steaderr.ErrInvalidKey):
		return classInvalidKey
	case errors.Is(err, steaderr.ErrInvalidArgument):
		return classInvalidArgument
	case errors.Is(err, steaderr.ErrTooLarge):
		return classTooLarge
	case errors.Is(err, steaderr.ErrConflict):
		return classConflict
	case errors.Is(err, steaderr.ErrWrongGroup):
		return classWrongGroup
	case errors.Is(err, steaderr.ErrUnknownGroup):
		return classUnknownGroup
	case errors.Is(err, steaderr.ErrLeased):
		return classLeased
	case errors.Is(err, steaderr.ErrInvalidName):
		return classInvalidName
	case errors.Is(err, steaderr.ErrLost):
		return classLost
	}
	return classOther
}

// outcome is one operation's result on one store.
type outcome struct {
	class string
	err   error
	out   string // the result, rendered; "" on error
}

func (o outcome) String() string {
	if o.err != nil {
		return fmt.Sprintf("%s: %v", o.class, o.err)
	}
	return o.out
}

func failed(err error) outcome { return outcome{class: errClass(err), err: err} }

func succeeded(format string, args ...any) outcome {
	return outcome{class: classOK, out: fmt.Sprintf(format, args...)}
}

// apply runs o against s.
func apply(ctx context.Context, s *blob.Store, pool [][]byte, o op) outcome {
	switch o.kind {
	case opPut:
		key, err := s.Put(ctx, bytes.NewReader(pool[o.value]))
		if err != nil {
			return failed(err)
		}
		return succeeded("key %s", key)
	case opPutExpect:
		if err := s.PutExpect(ctx, o.key, bytes.NewReader(pool[o.value])); err != nil {
			return failed(err)
		}
		return succeeded("stored")
	case opGet:
		rd, err := s.Get(ctx, o.key)
		if err != nil {
			return failed(err)
		}
		defer rd.Close()
		value, err := io.ReadAll(rd)
		if err != nil {
			return failed(fmt.Errorf("reading: %w", err))
		}
		return succeeded("%d bytes hashing to %s; Size %d; Key %s", len(value), blob.KeyOf(value), rd.Size(), rd.Key())
	case opStat:
		info, err := s.Stat(ctx, o.key)
		if err != nil {
			return failed(err)
		}
		return succeeded("%s", renderInfos([]blob.Info{info}))
	case opHas:
		has, err := s.Has(ctx, o.key)
		if err != nil {
			return failed(err)
		}
		return succeeded("%v", has)
	case opDelete:
		if err := s.Delete(ctx, o.key); err != nil {
			return failed(err)
		}
		return succeeded("deleted")
	case opList:
		page, err := s.List(ctx, o.key, o.limit)
		if err != nil {
			return failed(err)
		}
		return succeeded("%s", renderInfos(page))
	case opAll:
		var got []blob.Info
		for info, err := range s.All(ctx, o.key) {
			if err != nil {
				return failed(err)
			}
			got = append(got, info)
			if len(got) == o.limit {
				break
			}
		}
		return succeeded("%s", renderInfos(got))
	}
	return failed(fmt.Errorf("enginetest: unknown op kind %d", o.kind))
}

func renderInfos(infos []blob.Info) string {
	parts := make([]string, len(infos))
	for i, info := range infos {
		parts[i] = fmt.Sprintf("%s/%d", shortKey(info.Key), info.Size)
	}
	return "[" + strings.Join(parts, " ") + "]"
}
