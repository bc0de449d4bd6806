// Package chunkid draws chunk set ids for the engines' BeginUpload and
// checks the span of a chunk an engine's WriteChunk is given. An id
// is random, 63 bits from crypto/rand, so that over HTTP it is a
// capability: knowing one upload's id tells nothing of another's. The
// engine that stores an upload under it retries on the rare collision.
package chunkid

import (
	"crypto/rand"
	"encoding/binary"
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

// CheckSpan refuses, with an error wrapping steaderr.ErrInvalidArgument, a
// chunk of n bytes at off that starts before 0 or ends past the largest
// int64, where off+n would wrap around and slip past an overlap check.
func CheckSpan(off int64, n int) error {
	if off < 0 || off > math.MaxInt64-int64(n) {
		return fmt.Errorf("%w: a chunk of %d bytes at offset %d: want an offset from 0 whose end fits in an int64", steaderr.ErrInvalidArgument, n, off)
	}
	return nil
}
