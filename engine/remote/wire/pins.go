package wire

import "time"

// PinRequest is the body of the pin endpoints: the pin (key, Owner) lasts
// until at least Now + TTL. Now, when set, is the instant the pin is judged
// at and its TTL runs from; a server accepts it only when started with
// client clocks allowed (tests).
type PinRequest struct {
	Owner string    `json:"owner,omitempty"`
	TTL   Duration  `json:"ttl"`
	Now   time.Time `json:"now,omitzero"`
}

// PinAnswer is a pin endpoint's answer. Renewed reports, for a renewal,
// whether the pin was live and is now extended.
type PinAnswer struct {
	Key     string `json:"key"`
	Owner   string `json:"owner"`
	Renewed bool   `json:"renewed,omitempty"`
}
