package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/steadkit/stead/blob"
)

var largeMiB = flag.Int("large-mib", 64, "value size of the large-pg and large-sqlite groups, in MiB")

// largeChunk is the raw paths' chunk: stead's default.
const largeChunk = blob.DefaultChunkSize

// The large-blob groups (docs/decisions/0011-large-blobs.md): one value of
// -large-mib per operation, put and got by stead, by the raw driver doing
// the same storage (1 MiB chunk rows, one statement each, no hashing), and
// as a local file written with fsync and read back. Run with -callers 1;
// multiply ops/s by the size for MiB/s. Each scenario's peak RSS (VmHWM,
// reset before each operation) is printed after the table.
func largeScenarios() []scenario {
	var all []scenario
	for _, g := range []struct {
		group string
		open  opener
		raw   func(ctx context.Context) (rawChunks, func(), error)
	}{
		{"large-pg", openSteadPG, rawChunksPG},
		{"large-sqlite", openSteadSQLite, rawChunksSQLite},
	} {
		for _, sc := range []scenario{
			{name: "put raw", setup: largeRawPut(g.raw)},
			{name: "put stead", base: "put raw", setup: largeSteadPut(g.open)},
			{name: "put file+fsync", base: "put raw", setup: largeFilePut},
			{name: "get raw", setup: largeRawGet(g.raw)},
			{name: "get stead", base: "get raw", setup: largeSteadGet(g.open)},
			{name: "get file", base: "get raw", setup: largeFileGet},
		} {
			sc.group = g.group
			sc.setup = withRSS(sc.group+"/"+sc.name, sc.setup)
			all = append(all, sc)
		}
	}
	// No cliff at the inline limit: stead puts of growing sizes, MiB/s =
	// ops/s × size.
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20, 16 << 20} {
		all = append(all, scenario{group: "sizes-pg", name: fmt.Sprintf("put stead %dKiB", size>>10), setup: sizedSteadPut(openSteadPG, size)})
	}
	return all
}

// largeValue returns a reader of the operation's value: -large-mib of
// pseudo-random bytes determined by seed.
func largeValue(seed uint64) io.Reader {
	var s [32]byte
	s[0], s[1], s[2] = byte(seed), byte(seed>>8), byte(seed>>16)
	return io.LimitReader(rand.NewChaCha8(s), int64(*largeMiB)<<20)
}

// rss tracks each scenario's peak resident memory.
var rss struct {
	mu   sync.Mutex
	peak map[string]int64 // KiB
}

// withRSS wraps setup's operation: each runs with the process's peak RSS
// reset, and the peak it reached is recorded under name.
func withRSS(name string, setup setupFunc) setupFunc {
	return func(ctx context.Context, n int) (opFunc, func(), error) {
		op, cleanup, err := setup(ctx, n)
		if err != nil {
			return nil, nil, err
		}
		return measured(name, op), cleanup, nil
	}
}

// measured runs op with the process's peak RSS reset, and records the peak
// it reached under name.
func measured(name string, op opFunc) opFunc {
	return func(ctx context.Context, w, i int) error {
		_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // resets VmHWM (Linux)
		err := op(ctx, w, i)
		if kib := vmHWM(); kib > 0 {
			rss.mu.Lock()
			if rss.peak == nil {
				rss.peak = map[string]int64{}
			}
			rss.peak[name] = max(rss.peak[name], kib)
			rss.mu.Unlock()
		}
		return err
	}
}

func vmHWM() int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kib int64
			fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kib)
			return kib
		}
	}
	return -1
}

// printRSS prints the peak RSS of every measured scenario.
func printRSS() {
	rss.mu.Lock()
	defer rss.mu.Unlock()
	if len(rss.peak) == 0 {
		return
	}
	fmt.Println("\npeak RSS (VmHWM) per operation:")
	for _, sc := range allScenarios() {
		if kib, ok := rss.peak[sc.group+"/"+sc.name]; ok {
			fmt.Printf("  %s/%s: %.1f MiB\n", sc.group, sc.name, float64(kib)/1024)
		}
	}
}

func largeSteadPut(open opener) setupFunc {
	return func(ctx context.Context, n int) (opFunc, func(), error) {
		st, cleanup, err := open(ctx)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, w, i int) error {
			_, err := st.Blobs.Put(ctx, largeValue(uint64(w<<20|i)))
			return err
		}, func() { st.Close(); cleanup() }, nil
	}
}

func largeSteadGet(open opener) setupFunc {
	return func(ctx context.Context, n int) (opFunc, func(), error) {
		st, cleanup, err := open(ctx)
		if err != nil {
			return nil, nil, err
		}
		key, err := st.Blobs.Put(ctx, largeValue(1<<30))
		if err != nil {
			st.Close()
			cleanup()
			return nil, nil, err
		}
		return func(ctx context.Context, w, i int) error {
			rd, err := st.Blobs.Get(ctx, key)
			if err != nil {
				return err
			}
			_, err = rd.WriteTo(io.Discard)
			return err
		}, func() { st.Close(); cleanup() }, nil
	}
}

// rawChunks is the raw driver's chunk storage: stead's blob_chunks layout.
type rawChunks struct {
	insert func(ctx context.Context, set, off int64, data []byte) error
	read   func(ctx context.Context, set, off int64) ([]byte, error)
}

const (
	pgChunksDDL     = "CREATE TABLE %s.chunks (chunks bigint NOT NULL, off bigint NOT NULL, data bytea NOT NULL, PRIMARY KEY (chunks, off)); ALTER TABLE %[1]s.chunks ALTER COLUMN data SET STORAGE EXTERNAL"
	sqliteChunksDDL = "CREATE TABLE chunks (chunks INTEGER NOT NULL, off INTEGER NOT NULL, data BLOB NOT NULL, PRIMARY KEY (chunks, off))"
)

func rawChunksPG(ctx context.Context) (rawChunks, func(), error) {
	schema, drop, err := scratchSchema(ctx, "rawlarge")
	if err != nil {
		return rawChunks{}, nil, err
	}
	var pool *pgxpool.Pool
	pool, err = rawPool(ctx, "")
	if err == nil {
		_, err = pool.Exec(ctx, "CREATE SCHEMA "+schema)
	}
	if err == nil {
		_, err = pool.Exec(ctx, fmt.Sprintf(pgChunksDDL, schema))
	}
	if err != nil {
		drop()
		return rawChunks{}, nil, err
	}
	insert := "INSERT INTO " + schema + ".chunks (chunks, off, data) VALUES ($1, $2, $3)"
	read := "SELECT data FROM " + schema + ".chunks WHERE chunks = $1 AND off <= $2 ORDER BY off DESC LIMIT 1"
	return rawChunks{
		insert: func(ctx context.Context, set, off int64, data []byte) error {
			_, err := pool.Exec(ctx, insert, set, off, data)
			return err
		},
		read: func(ctx context.Context, set, off int64) ([]byte, error) {
			var data []byte
			err := pool.QueryRow(ctx, read, set, off).Scan(&data)
			return data, err
		},
	}, func() { pool.Close(); drop() }, nil
}

func rawChunksSQLite(ctx context.Context) (rawChunks, func(), error) {
	writer, reader, cleanup, err := rawSQLite(sqliteChunksDDL)
	if err != nil {
		return rawChunks{}, nil, err
	}
	return rawChunks{
		insert: func(ctx context.Context, set, off int64, data []byte) error {
			_, err := writer.ExecContext(ctx, "INSERT INTO chunks (chunks, off, data) VALUES (?, ?, ?)", set, off, data)
			return err
		},
		read: func(ctx context.Context, set, off int64) ([]byte, error) {
			var data []byte
			err := reader.QueryRowContext(ctx, "SELECT data FROM chunks WHERE chunks = ? AND off <= ? ORDER BY off DESC LIMIT 1", set, off).Scan(&data)
			if err == sql.ErrNoRows {
				err = fmt.Errorf("chunk %d/%d: %w", set, off, err)
			}
			return data, err
		},
	}, cleanup, nil
}

// rawPutValue stores one value's chunks under set.
func rawPutValue(ctx context.Context, raw rawChunks, set int64, r io.Reader) error {
	buf := make([]byte, largeChunk)
	for off := int64(0); ; {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if err := raw.insert(ctx, set, off, buf[:n]); err != nil {
				return err
			}
			off += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func largeRawPut(open func(ctx context.Context) (rawChunks, func(), error)) setupFunc {
	return func(ctx context.Context, n int) (opFunc, func(), error) {
		raw, cleanup, err := open(ctx)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, w, i int) error {
			return rawPutValue(ctx, raw, int64(w<<40|i+1), largeValue(uint64(w<<20|i)))
		}, cleanup, nil
	}
}

func largeRawGet(open func(ctx context.Context) (rawChunks, func(), error)) setupFunc {
	return func(ctx context.Context, n int) (opFunc, func(), error) {
		raw, cleanup, err := open(ctx)
		if err != nil {
			return nil, nil, err
		}
		if err := rawPutValue(ctx, raw, 0, largeValue(1<<30)); err != nil {
			cleanup()
			return nil, nil, err
		}
		size := int64(*largeMiB) << 20
		return func(ctx context.Context, w, i int) error {
			for off := int64(0); off < size; {
				data, err := raw.read(ctx, 0, off)
				if err != nil {
					return err
				}
				off += int64(len(data))
			}
			return nil
		}, cleanup, nil
	}
}

func largeFilePut(ctx context.Context, n int) (opFunc, func(), error) {
	dir, err := os.MkdirTemp("", "bench-large-")
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, w, i int) error {
		path := filepath.Join(dir, fmt.Sprint(w, "-", i))
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		_, err = io.CopyBuffer(f, largeValue(uint64(w<<20|i)), make([]byte, largeChunk))
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		os.Remove(path)
		return err
	}, func() { os.RemoveAll(dir) }, nil
}

func largeFileGet(ctx context.Context, n int) (opFunc, func(), error) {
	dir, err := os.MkdirTemp("", "bench-large-")
	if err != nil {
		return nil, nil, err
	}
	path := filepath.Join(dir, "value")
	f, err := os.Create(path)
	if err == nil {
		_, err = io.Copy(f, largeValue(1<<30))
		f.Close()
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return func(ctx context.Context, w, i int) error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyBuffer(io.Discard, f, make([]byte, largeChunk))
		return err
	}, func() { os.RemoveAll(dir) }, nil
}

func sizedSteadPut(open opener, size int) setupFunc {
	return func(ctx context.Context, n int) (opFunc, func(), error) {
		st, cleanup, err := open(ctx)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, w, i int) error {
			var s [32]byte
			s[0], s[1], s[2], s[3] = byte(w), byte(i), byte(i>>8), byte(i>>16)
			_, err := st.Blobs.Put(ctx, io.LimitReader(rand.NewChaCha8(s), int64(size)))
			return err
		}, func() { st.Close(); cleanup() }, nil
	}
}
