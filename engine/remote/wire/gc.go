package wire

import "time"

// SweepRequest is the body of POST /v1/gc/sweep. AllUnreferenced lets the
// sweep delete in a store that never declared liveness.
type SweepRequest struct {
	DryRun          bool `json:"dry_run,omitempty"`
	AllUnreferenced bool `json:"all_unreferenced,omitempty"`
}

// SweepReport is what one sweep did (or, in a dry run, would do).
// Aborted is "SweeperBusy" when another sweep held the lease: an answer,
// not an error.
type SweepReport struct {
	DryRun     bool      `json:"dry_run"`
	Aborted    string    `json:"aborted,omitempty"`
	Reaped     int64     `json:"reaped"`
	ReapedRefs int64     `json:"reaped_refs"`
	Uploads    int64     `json:"uploads"`
	Taken      int64     `json:"taken"`
	Deleted    int64     `json:"deleted"`
	Rescued    int64     `json:"rescued"`
	Absent     int64     `json:"absent"`
	BytesFreed int64     `json:"bytes_freed"`
	Staged     int64     `json:"staged"`
	Covered    int64     `json:"covered"`
	Wrapped    bool      `json:"wrapped"`
	NextPass   time.Time `json:"next_pass,omitzero"`
	Stored     *GCStored `json:"stored,omitempty"`
	Duration   Duration  `json:"duration"`
}

// Pin is one pin, live or not.
type Pin struct {
	Key    string    `json:"key"`
	Owner  string    `json:"owner"`
	Expiry time.Time `json:"expiry"`
	Live   bool      `json:"live"`
}

// Candidate is one row of the delete window.
type Candidate struct {
	Key          string    `json:"key"`
	VisibleAfter time.Time `json:"visible_after"`
}

// PinsPage is the answer of GET /v1/pins: every pin and window row.
type PinsPage struct {
	Now    time.Time   `json:"now"`
	Pins   []Pin       `json:"pins"`
	Window []Candidate `json:"window"`
}

// Explanation says why a blob is kept or not.
type Explanation struct {
	Key          string    `json:"key"`
	Stored       bool      `json:"stored"`
	Size         int64     `json:"size"`
	Object       string    `json:"object,omitempty"`
	Pins         []Pin     `json:"pins"`
	Sources      []string  `json:"sources"`
	Refs         []RefPin  `json:"refs"`
	Parents      []string  `json:"parents"`
	Staged       bool      `json:"staged"`
	VisibleAfter time.Time `json:"visible_after,omitzero"`
	Now          time.Time `json:"now"`
	Verdict      string    `json:"verdict"`
}

// RefPin is a ref naming a key, as an explanation lists it: its expiry
// (none when zero), whether it is live, and whether it is weak (it keeps
// nothing).
type RefPin struct {
	Name   string    `json:"name"`
	Expiry time.Time `json:"expiry,omitzero"`
	Live   bool      `json:"live"`
	Weak   bool      `json:"weak,omitempty"`
}

// Source is a SQL liveness source: a text column of a table in the
// server's PostgreSQL database.
type Source struct {
	Schema string `json:"schema"`
	Table  string `json:"table"`
	Column string `json:"column"`
}

// Sources is the answer of GET /v1/gc/sources. Funcs name the Go-function
// sources registered in the server's process.
type Sources struct {
	Sources []Source `json:"sources"`
	Funcs   []string `json:"funcs,omitempty"`
}

// GCStep is the body of the garbage-collection mechanics a remote engine
// drives (reap, stage, take, arbitrate): the members each step uses. Lease
// names the sweep lease the step runs under (POST /v1/gc/lease): a step of
// a sweep whose lease is gone is refused with 409 lost.
type GCStep struct {
	Lease        string    `json:"lease,omitempty"`
	Now          time.Time `json:"now,omitzero"`
	DryRun       bool      `json:"dry_run,omitempty"`
	Grace        Duration  `json:"grace,omitempty"`
	Limit        int       `json:"limit,omitempty"`
	After        string    `json:"after,omitempty"`
	Keys         []string  `json:"keys,omitempty"`
	VisibleAfter time.Time `json:"visible_after,omitzero"`
}

// GCOrphans answers POST /v1/gc/orphans: the bucket objects the orphan
// step listed and deleted, and whether its listing wrapped.
type GCOrphans struct {
	Listed  int64 `json:"listed"`
	Deleted int64 `json:"deleted"`
	Wrapped bool  `json:"wrapped"`
}

// GCReaped answers a reap: the expired pins and refs removed.
type GCReaped struct {
	Pins int64 `json:"pins"`
	Refs int64 `json:"refs"`
}

// GCDeclared answers GET /v1/gc/declared: whether the store declares any
// liveness beyond pins (a source, a ref, a blob reference).
type GCDeclared struct {
	Declared bool `json:"declared"`
}

// GCStored answers GET /v1/gc/stored: what the store holds (gc.Stored).
type GCStored struct {
	Blobs        int64 `json:"blobs"`
	Bytes        int64 `json:"bytes"`
	PendingBlobs int64 `json:"pending_blobs"`
	PendingBytes int64 `json:"pending_bytes"`
}

// GCKeys answers a take: the candidates taken, in key order.
type GCKeys struct {
	Keys []string `json:"keys"`
}

// GCPass answers GET /v1/gc/pass: the staging pass's cursor ("" when the
// next range starts a new pass) and when the pass began.
type GCPass struct {
	After   string    `json:"after"`
	Started time.Time `json:"started,omitzero"`
}

// GCRange answers a staging step: the keys it covered and staged, and the
// last key covered ("" when the pass is complete).
type GCRange struct {
	Covered int64  `json:"covered"`
	Staged  int64  `json:"staged"`
	Last    string `json:"last"`
}

// Verdict is one key's arbitration: deleted, protected, busy or absent,
// and the deleted blob's size.
type Verdict struct {
	Key     string `json:"key"`
	Outcome string `json:"outcome"`
	Size    int64  `json:"size,omitempty"`
}

// Verdicts answers an arbitration or a blob deletion of many keys: one
// verdict per key, in the order asked.
type Verdicts struct {
	Verdicts []Verdict `json:"verdicts"`
}

// DeleteBlobs is the body of POST /v1/blobs/delete.
type DeleteBlobs struct {
	Keys []string  `json:"keys"`
	Now  time.Time `json:"now,omitzero"`
}

// SweepLease is the body and answer of POST /v1/gc/lease.
type SweepLease struct {
	Holder   string `json:"holder,omitempty"`
	ID       string `json:"id,omitempty"`
	Acquired bool   `json:"acquired"`
}
