// Package chunkid draws chunk set ids for the engines' BeginUpload, checks
// the span of a chunk an engine's WriteChunk is given, and whether the
// chunks a publish names tile its value. An id
// is random, 63 bits from crypto/rand, so that over HTTP it is a
// capability: knowing one upload's id tells nothing of another's. The
// engine that stores an upload under it retries on the rare collision.
package chunkid

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/steadkit/stead/steaderr"
)

// Draws bounds how many ids an engine tries before it gives up: with ids
// of 63 bits, a second collision in a row means something else is wrong.
const Draws = 8

// New returns a random id in [1, 2^63).
func New() int64 {
	for {
		var b [8]byte
		rand.Read(b[:]) // never fails (crypto/rand)
		if id := int64(binary.BigEndian.Uint64(b[:]) >> 1); id > 0 {
			return id
		}
	}
}

// Draw calls start with random ids (New) until it starts an upload under
// one, at most Draws times, and returns that id; start reports false when
// the id is taken.
func Draw(start func(id int64) (bool, error)) (int64, error) {
	for range Draws {
		id := New()
		started, err := start(id)
		if err != nil || started {
			return id, err
		}
	}
	return 0, errors.New("no free chunk set id in a few random draws")
}

// CheckSpan refuses, with an error wrapping steaderr.ErrInvalidArgument, a
// chunk of n bytes at off that starts before 0 or ends past the largest
// int64, where off+n would wrap around and slip past an overlap check.
func CheckSpan(off int64, n int) error {
	if off < 0 || off > math.MaxInt64-int64(n) {
		return fmt.Errorf("%w: a chunk of %d bytes at offset %d: want an offset from 0 whose end fits in an int64", steaderr.ErrInvalidArgument, n, off)
	}
	return nil
}

// CheckChunk is CheckSpan for a data chunk a WriteChunk is given, which
// must also hold a byte at least.
func CheckChunk(off int64, data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: an empty chunk at offset %d", steaderr.ErrInvalidArgument, off)
	}
	return CheckSpan(off, len(data))
}

// Tiling checks that chunks, given in offset order, cover [0, size)
// exactly, each byte once: there is one, the first starts at 0, and each
// ends where the next starts and the last at size. The zero Tiling has
// seen no chunk.
type Tiling struct {
	end    int64 // where the chunks seen so far end
	chunks int
	broken bool // a gap, an overlap or an empty chunk was seen
}

// Add takes the next chunk: n bytes at off.
func (t *Tiling) Add(off, n int64) {
	if off != t.end || n <= 0 {
		t.broken = true
		return
	}
	t.end += n
	t.chunks++
}

// Covers reports whether the chunks added tile [0, size).
func (t *Tiling) Covers(size int64) bool {
	return !t.broken && t.chunks > 0 && t.end == size
}
