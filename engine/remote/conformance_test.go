package remote_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/steadkit/stead/internal/testing/apicheck"

	"github.com/steadkit/stead/engine/enginetest/faultengine"
	"github.com/steadkit/stead/engine/memory"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine"
	"github.com/steadkit/stead/engine/enginetest"
	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/engine/remote"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/server"
	"github.com/steadkit/stead/steaderr"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// serve starts a server over the store at url (migrated unless virgin)
// and returns a remote engine on it. The server allows client clocks,
// as the suite moves time through the engine seam.
func serve(t *testing.T, url string, virgin bool) engine.Engine {
	t.Helper()
	var opts []stead.Option
	if virgin {
		opts = append(opts, stead.WithoutMigrate())
	}
	st, err := stead.Open(context.Background(), url, opts...)
	if err != nil {
		t.Fatalf("stead.Open(%s): %v", url, err)
	}
	// One backend's exchanges are checked against docs/openapi.yaml: the
	// server answers the same way over every engine, and the check costs
	// about 40% more time under -race.
	return serveStore(t, st, url == "mem://")
}

// serveFaulty starts a server over a memory engine whose calls fail when
// fail says so, and returns a remote engine on it.
func serveFaulty(t *testing.T, fail func(op string) error) engine.Engine {
	t.Helper()
	inner := faultengine.New(memory.New(), faultengine.Func(func(op faultengine.Op) error { return fail(string(op)) }))
	st, err := stead.New(context.Background(), inner)
	if err != nil {
		t.Fatalf("stead.New over a fault-injected engine: %v", err)
	}
	// Its answers are not checked against docs/openapi.yaml: it makes
	// engines fail in ways no engine does (ErrWrongGroup from a schema
	// read).
	return serveStore(t, st, false)
}

// serveStore starts a server over st, closed with the test, and returns
// a remote engine on it; with checked, every exchange is checked against
// docs/openapi.yaml.
func serveStore(t *testing.T, st *stead.Store, checked bool) engine.Engine {
	t.Helper()
	var h http.Handler = server.New(st, server.Options{
		ClientClock: true,
		Token:       "conformance",
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if checked {
		h = apicheck.Load(t).Wrap(t, h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		st.Close()
	})
	eng, err := remote.Open(context.Background(), remote.Config{URL: srv.URL, Token: "conformance"})
	if err != nil {
		t.Fatalf("remote.Open: %v", err)
	}
	t.Cleanup(func() { eng.Close() })
	behind.Store(eng, st)
	t.Cleanup(func() { behind.Delete(eng) })
	return eng
}

// behind maps each remote engine serve returns to the server's store.
var behind sync.Map

// noFuncSources is why the remote engine over memory or SQLite has no
// liveness source the suite can use.
const noFuncSources = "a Go-function source cannot cross HTTP, and only a server over PostgreSQL takes SQL sources"

// refTable creates the suite's reference table in the PostgreSQL database
// behind eng's server.
func refTable(t *testing.T, eng engine.Engine, table, column string) (gc.Source, func(blob.Key, bool)) {
	t.Helper()
	st, ok := behind.Load(eng)
	if !ok {
		t.Fatal("refTable: no server behind the engine")
	}
	pg := st.(*stead.Store).Engine().(*postgres.Engine)
	return pgtest.RefTable(t, pg.Pool(), pg.Schema(), table, column)
}

// remoteChunk is the chunk size of the chunked conformance runs: each
// chunk is a round trip, so larger than the suite's tiny default.
const remoteChunk = 64 << 10

// TestConformance runs the engine suite over HTTP against a server over
// each local engine: every area over memory, which proves the HTTP
// mapping (with the fault engine, every error code); over SQLite and
// PostgreSQL the areas whose behaviour behind the server differs by
// engine (docs/design.md, "Where each promise is tested").
func TestConformance(t *testing.T) {
	t.Parallel()
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		enginetest.Run(t, enginetest.Harness{
			CancelMayCommit: true,
			ChunkSize:       remoteChunk,
			NoFuncSources:   noFuncSources,
			New:             func(t *testing.T) engine.Engine { return serve(t, "mem://", false) },
			Faulty:          serveFaulty,
		})
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		// The server's store keeps large values in a bytes tier: the
		// remote engine works unchanged over one.
		path := func(t *testing.T) string {
			return "sqlite://" + filepath.Join(t.TempDir(), "s.db") + "?bytes=" + url.QueryEscape("file://"+filepath.ToSlash(t.TempDir()))
		}
		enginetest.Run(t, enginetest.Harness{
			// The tier behind the server: values read, listed, explained
			// and collected as objects, a ref's blob resolved from the
			// tier, a small blob and its refs in SQLite's own commit; a
			// virgin and a migrated SQLite schema.
			Areas:           []string{"Blob", "GCChunked", "Lifecycle", "PutSet", "RefResolve", "Upload"},
			CancelMayCommit: true,
			ChunkSize:       remoteChunk,
			NoFuncSources:   noFuncSources,
			New: func(t *testing.T) engine.Engine {
				eng := serve(t, path(t), false)
				objectsPastInline(t, eng)
				return eng
			},
			Virgin: func(t *testing.T) engine.Engine { return serve(t, path(t), true) },
		})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		enginetest.Run(t, enginetest.Harness{
			// SQL liveness sources (the only ones that cross HTTP), a
			// shared cluster's arbitration, waits woken by LISTEN, the
			// database's clock, virgin schemas for locks and records, the
			// joined ref-and-blob read and the one-round-trip PutSet.
			Areas:           []string{"GC", "Lifecycle", "Lock", "PutSet", "Record", "Ref", "RefResolve"},
			CancelMayCommit: true,
			ChunkSize:       remoteChunk,
			RefTable:        refTable,
			New:             func(t *testing.T) engine.Engine { return serve(t, pgtest.Stead(t, false).StoreURL(), false) },
			Virgin:          func(t *testing.T) engine.Engine { return serve(t, pgtest.New(t).StoreURL(), true) },
		})
	})
}

// TestTLS opens the remote engine over https with a token, and refuses a
// wrong token at Open.
func TestTLS(t *testing.T) {
	t.Parallel()
	st, err := stead.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv := httptest.NewTLSServer(server.New(st, server.Options{Token: "tls-token"}))
	t.Cleanup(srv.Close)
	if _, err := remote.Open(context.Background(), remote.Config{URL: srv.URL, Token: "wrong", Client: srv.Client()}); err == nil || !strings.Contains(err.Error(), "unauthorized") {
		t.Fatalf("Open with a wrong token: %v", err)
	}
	eng, err := remote.Open(context.Background(), remote.Config{URL: srv.URL, Token: "tls-token", Client: srv.Client()})
	if err != nil {
		t.Fatalf("Open over https: %v", err)
	}
	defer eng.Close()
	if current, latest, err := eng.SchemaVersion(context.Background()); err != nil || current != latest {
		t.Fatalf("SchemaVersion over https = %d, %d, %v", current, latest, err)
	}
	for _, bad := range []string{"ftp://x", "http://", "http://user:pw@host:1", "http://host:1/?q=1"} {
		if _, err := remote.Open(context.Background(), remote.Config{URL: bad}); !errors.Is(err, stead.ErrInvalidArgument) || strings.Contains(err.Error(), "pw") {
			t.Errorf("Open(%q) = %v, want ErrInvalidArgument without the URL's secrets", bad, err)
		}
	}
}

// objectsPastInline checks, once t is done, that every value the tiered
// store behind eng's server holds keeps its bytes past the inline limit
// in bucket objects, however it came (a remote store's put, appends
// through the engine seam): no chunk row holds a byte past the limit.
func objectsPastInline(t *testing.T, eng engine.Engine) {
	t.Helper()
	v, _ := behind.Load(eng)
	st := v.(*stead.Store)
	t.Cleanup(func() {
		ctx := context.Background()
		b := st.Engine().Blobs()
		var large []blob.Info
		if err := b.List(ctx, blob.Key{}, blob.MaxDeleteBatch, func(info blob.Info) bool {
			if info.Size > blob.InlineLimit {
				large = append(large, info)
			}
			return true
		}); err != nil {
			if !errors.Is(err, steaderr.ErrClosed) {
				t.Errorf("listing the server's blobs: %v", err)
			}
			return
		}
		for _, info := range large {
			stored, err := b.Get(ctx, info.Key)
			if err != nil || stored.Object != "" {
				continue // deleted since, or one object
			}
			if stored.Chunks == 0 {
				t.Errorf("%s (%d bytes) is stored inline on a tiered server", info.Key, info.Size)
				continue
			}
			for off := int64(0); off < stored.Size; {
				c, err := b.ReadChunk(ctx, stored.Chunks, off)
				if err != nil {
					break
				}
				if c.Object == "" && c.Start+int64(len(c.Data)) > blob.InlineLimit {
					t.Errorf("%s (%d bytes) keeps [%d, %d) in a chunk row on a tiered server, past the inline limit", info.Key, info.Size, c.Start, c.Start+int64(len(c.Data)))
					break
				}
				off = c.Start + max(c.Size, int64(len(c.Data)))
			}
		}
	})
}
