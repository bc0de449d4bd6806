package wire

import "time"

// ChildrenHeader lists, comma-separated, the blobs a put's content
// references (PUT or POST /v1/blobs): while the put's blob is stored they
// are kept. The server's header limit holds MaxHeaderChildren of them; an
// upload's publish carries any number.
const ChildrenHeader = "Stead-Children"

// MaxHeaderChildren is how many keys ChildrenHeader carries within the
// server's 64 KiB header limit, with room for the other headers.
const MaxHeaderChildren = 800

// Ref is a ref as the API answers it (GET, PUT, PATCH /v1/refs/{name});
// its version is also the answer's ETag.
type Ref struct {
	Name       string    `json:"name"`
	Key        string    `json:"key"`
	Version    int64     `json:"version"`
	Annotation []byte    `json:"annotation,omitempty"`
	Expiry     time.Time `json:"expiry,omitzero"`
	Weak       bool      `json:"weak,omitempty"`
}

// RefSet is the body of PUT /v1/refs/{name}: the key, and optionally a TTL
// (no expiry without one; one given must be positive, ref.CheckTTL), an
// annotation (base64) and weak (the ref names the key without keeping
// it). Now, when set, is the instant the TTL runs from; a server accepts
// it only when started with client clocks allowed (tests).
type RefSet struct {
	Key        string    `json:"key"`
	TTL        *Duration `json:"ttl,omitempty"`
	Annotation []byte    `json:"annotation,omitempty"`
	Weak       bool      `json:"weak,omitempty"`
	Now        time.Time `json:"now,omitzero"`
}

// RefTouch is the body of PATCH /v1/refs/{name}: renew the ref's expiry
// to now + TTL; with Lazy, only when less than half of TTL is left.
type RefTouch struct {
	TTL  Duration  `json:"ttl"`
	Now  time.Time `json:"now,omitzero"`
	Lazy bool      `json:"lazy,omitempty"`
}

// RefPage is the answer of GET /v1/refs: the refs of one page in name
// order, and Next, the name to list after, when the page is full.
type RefPage struct {
	Refs []Ref  `json:"refs"`
	Next string `json:"next,omitempty"`
}
