package wire

// Resolved is the answer of GET /v1/refs/{name}?stored=true: the live ref
// and, read with it from one snapshot, the stored form of its blob.
type Resolved struct {
	Ref
	Stored Stored `json:"stored"`
}

// MaxResolved bounds a Resolved answer: a stored form (MaxStored) and a
// ref's name and annotation, base64-encoded, with its fields.
const MaxResolved = MaxStored + 16<<10
