package wake

import "testing"

func pending(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestHub(t *testing.T) {
	t.Parallel()
	var h Hub
	a1, stopA1 := h.Subscribe("a")
	a2, stopA2 := h.Subscribe("a")
	b, stopB := h.Subscribe("b")

	h.Wake("a")
	h.Wake("a") // coalesced with the first
	if !pending(a1) || !pending(a2) || pending(b) {
		t.Fatal("Wake(a) did not wake exactly a's subscribers")
	}
	if pending(a1) {
		t.Fatal("two Wakes left two wake-ups pending")
	}
	h.Wake("nobody")
	stopA1()
	h.WakeAll()
	if pending(a1) || !pending(a2) || !pending(b) {
		t.Fatal("WakeAll woke a stopped subscriber or missed a live one")
	}
	stopA2()
	stopB()
	if len(h.subs) != 0 {
		t.Fatalf("subscriptions left after every stop: %v", h.subs)
	}
}
