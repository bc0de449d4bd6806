package wire

import "time"

// PutSet is the body of POST /v1/blobs/{key}/refs: the value (base64, at
// most the inline limit) stored under the key, pinned as the query's
// owner and ttl say, and the refs set to it, in one commit.
type PutSet struct {
	Value []byte      `json:"value"`
	Refs  []PutSetRef `json:"refs"`
}

// PutSetRef is one ref of a PutSet: RefSet's fields but the key, and the
// condition a ref set's headers carry (IfAbsent: If-None-Match: *;
// IfVersion: If-Match).
type PutSetRef struct {
	Name       string    `json:"name"`
	TTL        *Duration `json:"ttl,omitempty"`
	Annotation []byte    `json:"annotation,omitempty"`
	Weak       bool      `json:"weak,omitempty"`
	IfAbsent   bool      `json:"if_absent,omitempty"`
	IfVersion  int64     `json:"if_version,omitempty"`
	Now        time.Time `json:"now,omitzero"`
}

// PutSetResult answers a PutSet: whether it stored the blob (also told by
// 201 rather than 200), the refs as set, in the request's order, and for
// each whether it created its name.
type PutSetResult struct {
	Created     bool   `json:"created"`
	Refs        []Ref  `json:"refs"`
	RefsCreated []bool `json:"refs_created"`
}
