// Package chunkid draws chunk set ids for the engines' BeginUpload. An id
// is random, 63 bits from crypto/rand, so that over HTTP it is a
// capability: knowing one upload's id tells nothing of another's. The
// engine that stores an upload under it retries on the rare collision.
package chunkid

import (
	"crypto/rand"
	"encoding/binary"
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
