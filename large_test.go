package stead_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/engine/sqlite"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/testing/pgtest"
)

// The large-blob tests that look inside an engine's database: residue after
// failed puts, corruption of stored chunks, a killed process's staged
// chunks (large_linux_test.go), peak memory.

// rawDB is a test's direct access to a store's database.
type rawDB struct {
	// rows counts the rows of every table of the store.
	rows func(t *testing.T) map[string]int64
	// flip inverts the first byte of every stored chunk starting at off.
	flip func(t *testing.T, off int64)
}

// largeBackend is an engine whose database the tests can look into.
type largeBackend struct {
	name string
	// open returns the URL of a fresh, empty store and its raw database.
	open func(t *testing.T, params string) (string, rawDB)
}

var largeBackends = []largeBackend{
	{"sqlite", openSQLiteRaw},
	{"postgres", openPostgresRaw},
}

func openSQLiteRaw(t *testing.T, params string) (string, rawDB) {
	path := filepath.Join(t.TempDir(), "s.db")
	url := "sqlite://" + path + params
	st, err := stead.Open(t.Context(), url) // migrates
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return url, rawDB{
		rows: func(t *testing.T) map[string]int64 {
			t.Helper()
			rows, err := db.QueryContext(t.Context(), "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
			if err != nil {
				t.Fatal(err)
			}
			var tables []string
			for rows.Next() {
				var name string
				if err := rows.Scan(&name); err != nil {
					t.Fatal(err)
				}
				tables = append(tables, name)
			}
			if err := errors.Join(rows.Err(), rows.Close()); err != nil {
				t.Fatal(err)
			}
			counts := map[string]int64{}
			for _, table := range tables {
				var n int64
				if err := db.QueryRowContext(t.Context(), fmt.Sprintf("SELECT count(*) FROM %q", table)).Scan(&n); err != nil {
					t.Fatal(err)
				}
				counts[table] = n
			}
			return counts
		},
		flip: func(t *testing.T, off int64) {
			t.Helper()
			var data []byte
			if err := db.QueryRowContext(t.Context(), "SELECT data FROM blob_chunks WHERE off = ?", off).Scan(&data); err != nil {
				t.Fatal(err)
			}
			data[0] ^= 1
			if _, err := db.ExecContext(t.Context(), "UPDATE blob_chunks SET data = ? WHERE off = ?", data, off); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func openPostgresRaw(t *testing.T, params string) (string, rawDB) {
	db := pgtest.New(t)
	url := db.StoreURL() + params
	st, err := stead.Open(t.Context(), url) // migrates
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	schema := pgx.Identifier{db.Schema}.Sanitize()
	return url, rawDB{
		rows: func(t *testing.T) map[string]int64 {
			t.Helper()
			rows, err := db.Admin.Query(t.Context(), "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_type = 'BASE TABLE'", db.Schema)
			if err != nil {
				t.Fatal(err)
			}
			tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			counts := map[string]int64{}
			for _, table := range tables {
				var n int64
				if err := db.Admin.QueryRow(t.Context(), "SELECT count(*) FROM "+schema+"."+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
					t.Fatal(err)
				}
				counts[table] = n
			}
			return counts
		},
		flip: func(t *testing.T, off int64) {
			t.Helper()
			if _, err := db.Admin.Exec(t.Context(), "UPDATE "+schema+".blob_chunks SET data = set_byte(data, 0, get_byte(data, 0) # 1) WHERE off = $1", off); err != nil {
				t.Fatal(err)
			}
		},
	}
}

// openEngine opens (without migrating) the engine at url.
func openEngine(t *testing.T, url string) engine.Engine {
	t.Helper()
	var eng engine.Engine
	var err error
	if strings.HasPrefix(url, "sqlite://") {
		var cfg sqlite.Config
		if cfg, err = sqlite.ParseURL(url); err == nil {
			eng, err = sqlite.Open(t.Context(), cfg)
		}
	} else {
		var cfg postgres.Config
		if cfg, err = postgres.ParseURL(url); err == nil {
			eng, err = postgres.Open(t.Context(), cfg)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng
}

// tinyChunks are store options under which every value over 16 bytes is
// stored in chunks of 1000 bytes, and pins lapse at once, so that tests can
// delete what they put.
var tinyChunks = blob.Options{InlineLimit: 16, ChunkSize: 1000, PinTTL: time.Microsecond}

// withoutPins drops the pins table from a row count: a put that succeeded
// leaves its (expired) pin for the GC sweep to reap.
func withoutPins(rows map[string]int64) map[string]int64 {
	delete(rows, "pins")
	return rows
}

// cancellingReader yields data and cancels its put's context once it has
// yielded at bytes, at which point a put may be anywhere: staging, between
// chunks, publishing.
type cancellingReader struct {
	r      io.Reader
	at, n  int
	cancel context.CancelFunc
}

func (c *cancellingReader) Read(p []byte) (int, error) {
	if c.n >= c.at {
		c.cancel()
	}
	n, err := c.r.Read(p[:min(len(p), max(c.at-c.n, 1))])
	c.n += n
	return n, err
}

// TestLargeResidue fails chunked puts at random points (a cancelled
// context, a failing reader, a digest mismatch, a deadline that expires
// mid-statement) and checks that every table is as it was; a put that took
// effect despite its error is deleted first, with its chunks. A statement
// abandoned by a cancelled context may still commit on the server after
// the put's clean-up ran (pgx closes the connection and does not wait):
// what such a statement staged must go when its upload lease lapses.
func TestLargeResidue(t *testing.T) {
	t.Parallel()
	for _, be := range largeBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			url, raw := be.open(t, "")
			opts := tinyChunks
			opts.UploadLease = 2 * time.Second
			store := blob.NewStore(openEngine(t, url).Blobs(), opts)
			ctx := t.Context()
			kept := []byte("an inline value")
			if _, err := store.Put(ctx, bytes.NewReader(kept)); err != nil {
				t.Fatal(err)
			}
			before := withoutPins(raw.rows(t))
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range 40 {
				value := make([]byte, 17+rng.IntN(8000))
				for j := range value {
					value[j] = byte(rng.Uint32())
				}
				key := blob.KeyOf(value)
				var err error
				switch i % 4 {
				case 0:
					pctx, cancel := context.WithCancel(ctx)
					_, err = store.Put(pctx, &cancellingReader{r: bytes.NewReader(value), at: rng.IntN(len(value) + 1), cancel: cancel})
					cancel()
				case 1:
					_, err = store.Put(ctx, io.MultiReader(bytes.NewReader(value[:rng.IntN(len(value))]), iotestErrReader{}))
				case 2:
					err = store.PutExpect(ctx, blob.KeyOf(value[1:]), bytes.NewReader(value))
				case 3:
					pctx, cancel := context.WithTimeout(ctx, time.Duration(rng.IntN(20_000))*time.Microsecond)
					_, err = store.Put(pctx, bytes.NewReader(value))
					cancel()
				}
				if has, herr := store.Has(ctx, key); herr != nil {
					t.Fatal(herr)
				} else if has {
					if err == nil || i%4 == 3 || i%4 == 0 {
						if derr := store.Delete(ctx, key); derr != nil {
							t.Fatal(derr)
						}
					} else {
						t.Fatalf("attempt %d: a put that failed (%v) stored its value", i, err)
					}
				}
				after := withoutPins(raw.rows(t))
				if !maps.Equal(after, before) && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
					t.Logf("attempt %d (%v): rows %v; waiting for the upload lease", i, err, after)
					testkit.Until(t, "the abandoned upload to be reaped", func() bool {
						if _, err := store.ReapUploads(ctx); err != nil {
							t.Fatal(err)
						}
						// A cancelled put may still commit after it returned (the
						// server finishes the statement): then it must be whole,
						// and it stays, pinned, as a new baseline.
						if rd, gerr := store.Get(ctx, key); gerr == nil {
							b, rerr := io.ReadAll(rd)
							rd.Close()
							if rerr != nil || !bytes.Equal(b, value) {
								t.Fatalf("attempt %d: a cancelled put that committed late is not whole: %v", i, rerr)
							}
							before = withoutPins(raw.rows(t))
						}
						after = withoutPins(raw.rows(t))
						return maps.Equal(after, before)
					})
				}
				if !maps.Equal(after, before) {
					t.Fatalf("attempt %d (%d bytes, error %v): rows %v, want %v as before", i, len(value), err, after, before)
				}
			}
			got, err := store.Get(ctx, blob.KeyOf(kept))
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := io.ReadAll(got); !bytes.Equal(b, kept) {
				t.Fatal("the value stored before the failed puts changed")
			}
		})
	}
}

// iotestErrReader fails every read.
type iotestErrReader struct{}

func (iotestErrReader) Read([]byte) (int, error) { return 0, errors.New("source failed") }

// TestLargeNoOrphans races puts of one chunked value against each other
// and against deletes of its key, then checks that exactly one value's
// chunks, or none, are stored, and no upload is left.
func TestLargeNoOrphans(t *testing.T) {
	t.Parallel()
	for _, be := range largeBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			url, raw := be.open(t, "")
			store := blob.NewStore(openEngine(t, url).Blobs(), tinyChunks)
			ctx := t.Context()
			value := bytes.Repeat([]byte("0123456789"), 450) // 5 chunks
			key := blob.KeyOf(value)
			var wg sync.WaitGroup
			for range 6 {
				wg.Go(func() {
					for range 5 {
						if _, err := store.Put(ctx, bytes.NewReader(value)); err != nil {
							t.Errorf("Put: %v", err)
						}
					}
				})
			}
			wg.Go(func() {
				for range 10 {
					// ErrProtected: a put holds the row, re-pinning it.
					if err := store.Delete(ctx, key); err != nil && !errors.Is(err, stead.ErrNotFound) && !errors.Is(err, stead.ErrProtected) {
						t.Errorf("Delete: %v", err)
					}
				}
			})
			wg.Wait()
			rows := raw.rows(t)
			has, err := store.Has(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			wantChunks := int64(0)
			if has {
				wantChunks = 5
				if err := store.Verify(ctx, key); err != nil {
					t.Fatalf("Verify after the race: %v", err)
				}
			}
			if rows["blob_chunks"] != wantChunks || rows["blob_uploads"] != 0 {
				t.Fatalf("after the race (stored: %v): rows %v, want %d chunks and no upload", has, rows, wantChunks)
			}

			// A re-put while this store's pin is fresh publishes nothing:
			// its staged chunks must go too.
			pinning := blob.NewStore(openEngine(t, url).Blobs(), blob.Options{InlineLimit: 16, ChunkSize: 1000})
			for range 3 {
				if _, err := pinning.Put(ctx, bytes.NewReader(value)); err != nil {
					t.Fatal(err)
				}
			}
			if rows := raw.rows(t); rows["blob_chunks"] != 5 || rows["blob_uploads"] != 0 {
				t.Fatalf("after re-puts under a fresh pin: rows %v, want 5 chunks and no upload", rows)
			}
		})
	}
}

// TestLargeCorruption corrupts a stored chunk directly in the database:
// Verify and VerifyReads report ErrDigestMismatch at the end, an intact
// value still verifies, and a store without verification reads the
// corrupted bytes (the check costs a hash).
func TestLargeCorruption(t *testing.T) {
	t.Parallel()
	for _, be := range largeBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			url, raw := be.open(t, "")
			eng := openEngine(t, url)
			verifying := blob.NewStore(eng.Blobs(), blob.Options{InlineLimit: 16, ChunkSize: 1000, PinTTL: time.Microsecond, VerifyReads: true})
			plain := blob.NewStore(eng.Blobs(), tinyChunks)
			ctx := t.Context()
			value := bytes.Repeat([]byte("abcdefghij"), 350) // chunks at 0, 1000, 2000, 3000
			key, err := plain.Put(ctx, bytes.NewReader(value))
			if err != nil {
				t.Fatal(err)
			}
			intact := []byte("another value, over sixteen bytes")
			intactKey, err := plain.Put(ctx, bytes.NewReader(intact))
			if err != nil {
				t.Fatal(err)
			}
			raw.flip(t, 2000) // both values have a chunk at 0; only value one at 2000
			if err := plain.Verify(ctx, key); !errors.Is(err, stead.ErrDigestMismatch) {
				t.Fatalf("Verify(corrupted) = %v, want ErrDigestMismatch", err)
			}
			if err := plain.Verify(ctx, intactKey); err != nil {
				t.Fatalf("Verify(intact) = %v", err)
			}
			rd, err := verifying.Get(ctx, key)
			if err != nil {
				t.Fatalf("Get with VerifyReads: %v (the check is at EOF)", err)
			}
			got, err := io.ReadAll(rd)
			if !errors.Is(err, stead.ErrDigestMismatch) {
				t.Fatalf("reading a corrupted value with VerifyReads = %v, want ErrDigestMismatch", err)
			}
			if len(got) != len(value) {
				t.Fatalf("read %d bytes before the mismatch, want %d", len(got), len(value))
			}
			rd, _ = verifying.Get(ctx, key)
			if _, err := rd.WriteTo(io.Discard); !errors.Is(err, stead.ErrDigestMismatch) {
				t.Fatalf("WriteTo of a corrupted value with VerifyReads = %v, want ErrDigestMismatch", err)
			}
			rd, _ = plain.Get(ctx, key)
			got, err = io.ReadAll(rd)
			if err != nil || bytes.Equal(got, value) || len(got) != len(value) {
				t.Fatalf("reading without verification: %v; want the corrupted bytes", err)
			}
		})
	}
}

// TestLargePoolOfOne streams a chunked value through an engine whose pool
// has one connection while the reading loop makes other store calls: a
// reader holds no connection between chunk fetches, so nothing waits on it.
func TestLargePoolOfOne(t *testing.T) {
	t.Parallel()
	url, _ := openPostgresRaw(t, "&pool_max_conns=1")
	store := blob.NewStore(openEngine(t, url).Blobs(), tinyChunks)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	value := bytes.Repeat([]byte("pool of one "), 1000) // 12 chunks
	key, err := store.Put(ctx, bytes.NewReader(value))
	if err != nil {
		t.Fatal(err)
	}
	rd, err := store.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	p := make([]byte, 700)
	for i := 0; ; i++ {
		n, err := rd.Read(p)
		got = append(got, p[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if _, err := store.Stat(ctx, key); err != nil {
			t.Fatalf("Stat between reads: %v", err)
		}
		if _, err := store.Put(ctx, bytes.NewReader(fmt.Appendf(nil, "another value, number %d", i))); err != nil {
			t.Fatalf("Put between reads: %v", err)
		}
	}
	if !bytes.Equal(got, value) {
		t.Fatal("read the wrong bytes")
	}
}

// TestLargeSweepReapsUploads leaves an upload whose lease lapsed, as a
// killed put would, and checks that a GC sweep reaps it with its chunks.
func TestLargeSweepReapsUploads(t *testing.T) {
	t.Parallel()
	for _, be := range largeBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			url, raw := be.open(t, "")
			st, err := stead.Open(t.Context(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			before := withoutPins(raw.rows(t))
			eng := openEngine(t, url).Blobs()
			set, err := eng.BeginUpload(t.Context(), blob.BeginUploadParams{State: []byte("begun"), Lease: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			for off := int64(0); off < 3000; off += 1000 {
				if err := eng.WriteChunk(t.Context(), blob.WriteChunkParams{Set: set, Off: off, Data: make([]byte, 1000), State: []byte("appended"), Lease: time.Millisecond}); err != nil {
					t.Fatal(err)
				}
			}
			if rows := raw.rows(t); rows["blob_uploads"] != 1 || rows["blob_chunks"] != 3 {
				t.Fatalf("staged: rows %v, want one upload of 3 chunks", rows)
			}
			var rep gc.Report
			testkit.Until(t, "a sweep to reap the lapsed upload", func() bool {
				if rep, err = st.GC.Sweep(t.Context(), gc.SweepOptions{AllUnreferenced: true}); err != nil {
					t.Fatal(err)
				}
				return rep.Uploads == 1
			})
			if after := withoutPins(raw.rows(t)); !maps.Equal(after, before) {
				t.Fatalf("after the sweep (%v): rows %v, want %v", rep, after, before)
			}
			if err := eng.WriteChunk(t.Context(), blob.WriteChunkParams{Set: set, Off: 3000, Data: make([]byte, 10), State: []byte("late"), Lease: time.Minute}); !errors.Is(err, stead.ErrLost) {
				t.Fatalf("WriteChunk to a reaped upload = %v, want ErrLost", err)
			}
		})
	}
}
