package wire

import "time"

// Usage is the answer of GET /v1/usage: what the live refs under a prefix
// hold (stead.Usage).
type Usage struct {
	Prefix          string `json:"prefix"`
	Refs            int64  `json:"refs"`
	Blobs           int64  `json:"blobs"`
	Bytes           int64  `json:"bytes"`
	ReferencedBytes int64  `json:"referenced_bytes"`
	DedupSavedBytes int64  `json:"dedup_saved_bytes"`
	Truncated       bool   `json:"truncated"`
	// LastPush and LastPull are left out when none was noted.
	LastPush time.Time `json:"last_push,omitzero"`
	LastPull time.Time `json:"last_pull,omitzero"`
}
