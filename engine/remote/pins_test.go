package remote_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/server"
)

// pinServer starts a server over url and returns the server's store and
// a remote engine on it.
func pinServer(t *testing.T, url string, clientClock bool) (*stead.Store, *remote.Engine, string) {
	t.Helper()
	st, err := stead.Open(context.Background(), url)
	if err != nil {
		t.Fatalf("stead.Open(%s): %v", url, err)
	}
	srv := httptest.NewServer(server.New(st, server.Options{
		ClientClock: clientClock,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	}))
	t.Cleanup(func() {
		srv.Close()
		st.Close()
	})
	eng, err := remote.Open(context.Background(), remote.Config{URL: srv.URL})
	if err != nil {
		t.Fatalf("remote.Open: %v", err)
	}
	t.Cleanup(func() { eng.Close() })
	return st, eng, srv.URL
}

// serverPins returns the pins the server's engine holds.
func serverPins(t *testing.T, st *stead.Store) []gc.PinInfo {
	t.Helper()
	var out []gc.PinInfo
	if err := st.Engine().GC().Pins(t.Context(), gc.PinsParams{}, func(p gc.PinInfo) bool { out = append(out, p); return true }); err != nil {
		t.Fatalf("Pins: %v", err)
	}
	return out
}

func wantPins(t *testing.T, st *stead.Store, what string, want ...gc.PinInfo) {
	t.Helper()
	got := serverPins(t, st)
	if len(got) != len(want) {
		t.Fatalf("%s: server pins %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i].Key != want[i].Key || got[i].Owner != want[i].Owner || !got[i].Expiry.Equal(want[i].Expiry) {
			t.Fatalf("%s: server pins %v, want %v", what, got, want)
		}
	}
}

// TestPinsCarryParams checks that the remote engine's puts and pins are
// the server's rows with the client's owner, TTL and clock: the portable
// store's hot-key skip trusts exactly those.
func TestPinsCarryParams(t *testing.T) {
	t.Parallel()
	for name, url := range map[string]func(t *testing.T) string{
		"memory":   func(*testing.T) string { return "mem://" },
		"postgres": func(t *testing.T) string { return pgtest.New(t).StoreURL() },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st, eng, _ := pinServer(t, url(t), true)
			b := eng.Blobs()
			ctx := t.Context()
			t0 := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
			value := []byte("pinned over http")
			key := blob.KeyOf(value)

			if _, err := b.Put(ctx, blob.PutParams{Key: key, Value: value, Owner: "client-a", TTL: 90 * time.Second, Now: t0}); err != nil {
				t.Fatalf("Put: %v", err)
			}
			wantPins(t, st, "after Put", gc.PinInfo{Key: key, Owner: "client-a", Expiry: t0.Add(90 * time.Second)})

			if err := b.Pin(ctx, blob.PinParams{Key: key, Owner: "client/b", TTL: time.Hour, Now: t0}); err != nil {
				t.Fatalf("Pin: %v", err)
			}
			wantPins(t, st, "after Pin", gc.PinInfo{Key: key, Owner: "client-a", Expiry: t0.Add(90 * time.Second)},
				gc.PinInfo{Key: key, Owner: "client/b", Expiry: t0.Add(time.Hour)})

			ok, err := b.RenewPin(ctx, blob.PinParams{Key: key, Owner: "client-a", TTL: 2 * time.Minute, Now: t0.Add(time.Minute)})
			if err != nil || !ok {
				t.Fatalf("RenewPin(live) = %v, %v; want true", ok, err)
			}
			ok, err = b.RenewPin(ctx, blob.PinParams{Key: key, Owner: "client-a", TTL: time.Minute, Now: t0.Add(time.Hour)})
			if err != nil || ok {
				t.Fatalf("RenewPin(expired) = %v, %v; want false", ok, err)
			}
			wantPins(t, st, "after RenewPin", gc.PinInfo{Key: key, Owner: "client-a", Expiry: t0.Add(3 * time.Minute)},
				gc.PinInfo{Key: key, Owner: "client/b", Expiry: t0.Add(time.Hour)})

			if err := b.Unpin(ctx, blob.UnpinParams{Key: key, Owner: "client/b"}); err != nil {
				t.Fatalf("Unpin: %v", err)
			}
			if err := b.Unpin(ctx, blob.UnpinParams{Key: key, Owner: "nobody"}); err != nil {
				t.Fatalf("Unpin(absent pin): %v", err)
			}
			wantPins(t, st, "after Unpin", gc.PinInfo{Key: key, Owner: "client-a", Expiry: t0.Add(3 * time.Minute)})

			absent := blob.KeyOf([]byte("never stored"))
			if err := b.Pin(ctx, blob.PinParams{Key: absent, Owner: "client-a", TTL: time.Minute, Now: t0}); !errors.Is(err, stead.ErrNotFound) {
				t.Fatalf("Pin(absent) = %v, want ErrNotFound", err)
			}
			if ok, err := b.RenewPin(ctx, blob.PinParams{Key: absent, Owner: "client-a", TTL: time.Minute, Now: t0}); err != nil || ok {
				t.Fatalf("RenewPin(absent) = %v, %v; want false", ok, err)
			}
		})
	}
}

// TestPinsHostile sends bad owners, TTLs and bodies to the pin routes:
// each is a 400 (413 for an oversized body) that changes nothing.
func TestPinsHostile(t *testing.T) {
	t.Parallel()
	st, eng, _ := pinServer(t, "mem://", false)
	b := eng.Blobs()
	ctx := t.Context()
	value := []byte("hostile")
	key := blob.KeyOf(value)
	for _, tc := range []struct {
		name  string
		owner string
		ttl   time.Duration
		now   time.Time
		want  error
	}{
		{"empty owner", "", time.Minute, time.Time{}, stead.ErrInvalidName},
		{"long owner", strings.Repeat("o", 256), time.Minute, time.Time{}, stead.ErrInvalidName},
		{"control owner", "a\x00b", time.Minute, time.Time{}, stead.ErrInvalidName},
		{"zero ttl", "o", 0, time.Time{}, stead.ErrInvalidArgument},
		{"negative ttl", "o", -time.Second, time.Time{}, stead.ErrInvalidArgument},
		{"sub-µs ttl", "o", 999 * time.Nanosecond, time.Time{}, stead.ErrInvalidArgument},
		{"ttl over a day", "o", 25 * time.Hour, time.Time{}, stead.ErrInvalidArgument},
		{"client clock refused", "o", time.Minute, time.Now(), stead.ErrInvalidArgument}, // 400 bad_request
	} {
		if _, err := b.Put(ctx, blob.PutParams{Key: key, Value: value, Owner: tc.owner, TTL: tc.ttl, Now: tc.now}); !errors.Is(err, tc.want) {
			t.Errorf("Put(%s) = %v, want %v", tc.name, err, tc.want)
		}
		if err := b.Pin(ctx, blob.PinParams{Key: key, Owner: tc.owner, TTL: tc.ttl, Now: tc.now}); !errors.Is(err, tc.want) {
			t.Errorf("Pin(%s) = %v, want %v", tc.name, err, tc.want)
		}
		if tc.owner != "" { // an empty owner names no pin route
			if _, err := b.RenewPin(ctx, blob.PinParams{Key: key, Owner: tc.owner, TTL: tc.ttl, Now: tc.now}); !errors.Is(err, tc.want) {
				t.Errorf("RenewPin(%s) = %v, want %v", tc.name, err, tc.want)
			}
		}
	}
	if has, err := st.Blobs.Has(ctx, key); err != nil || has {
		t.Fatalf("after hostile puts: Has = %v, %v; want nothing stored", has, err)
	}
	if pins := serverPins(t, st); len(pins) != 0 {
		t.Fatalf("after hostile requests: pins %v", pins)
	}

	// A body that does not hash to the key stores nothing.
	if _, err := b.Put(ctx, blob.PutParams{Key: key, Value: []byte("other"), Owner: "o", TTL: time.Minute}); !errors.Is(err, stead.ErrDigestMismatch) {
		t.Fatalf("Put(mismatched body) = %v, want ErrDigestMismatch", err)
	}
	// A body over the inline limit is refused before the engine.
	big := bytes.Repeat([]byte{1}, blob.InlineLimit+1)
	if _, err := b.Put(ctx, blob.PutParams{Key: blob.KeyOf(big), Value: big, Owner: "o", TTL: time.Minute}); !errors.Is(err, stead.ErrTooLarge) {
		t.Fatalf("Put(InlineLimit+1) = %v, want ErrTooLarge", err)
	}
	if has, err := st.Blobs.Has(ctx, key); err != nil || has {
		t.Fatalf("after refused puts: Has = %v, %v", has, err)
	}
}

// TestHotKeySkipOverHTTP checks the skip the portable store makes on a
// re-put while its pin is young: the pin it trusts is the server's row,
// with the client's owner, and a curl user's plain PUT still pins with
// the server's own owner.
func TestHotKeySkipOverHTTP(t *testing.T) {
	t.Parallel()
	st, eng, url := pinServer(t, "mem://", true)
	ctx := t.Context()
	t0 := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	now := t0
	client := blob.NewStore(eng.Blobs(), blob.Options{Owner: "client-x", PinTTL: time.Minute, Now: func() time.Time { return now }})
	defer client.Close()
	value := []byte("hot key")
	key, err := client.Put(ctx, bytes.NewReader(value))
	if err != nil {
		t.Fatal(err)
	}
	wantPins(t, st, "after the first put", gc.PinInfo{Key: key, Owner: "client-x", Expiry: t0.Add(time.Minute)})
	now = t0.Add(20 * time.Second) // the pin has more than half its TTL left: the re-put writes nothing
	if _, err := client.Put(ctx, bytes.NewReader(value)); err != nil {
		t.Fatal(err)
	}
	wantPins(t, st, "after the skipped re-put", gc.PinInfo{Key: key, Owner: "client-x", Expiry: t0.Add(time.Minute)})
	// The pin the skip trusted protects the key on the server.
	if vs, err := eng.Blobs().Delete(ctx, blob.DeleteParams{Keys: []blob.Key{key}, Now: now}); err != nil || vs[0].Outcome != blob.Protected {
		t.Fatalf("Delete under the client's pin = %+v, %v; want protected", vs, err)
	}
	now = t0.Add(40 * time.Second) // past half: the re-put renews
	if _, err := client.Put(ctx, bytes.NewReader(value)); err != nil {
		t.Fatal(err)
	}
	wantPins(t, st, "after the renewing re-put", gc.PinInfo{Key: key, Owner: "client-x", Expiry: now.Add(time.Minute)})

	// curl's PUT /v1/blobs pins with the server's own owner.
	other := []byte("from curl")
	resp, err := http.Post(url+"/v1/blobs", "application/octet-stream", bytes.NewReader(other))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /v1/blobs: %s", resp.Status)
	}
	for _, p := range serverPins(t, st) {
		if p.Key == blob.KeyOf(other) && p.Owner == "client-x" {
			t.Fatalf("curl's put pinned with a client's owner: %v", p)
		}
	}
}
