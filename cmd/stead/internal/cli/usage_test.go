package cli

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/server"
)

// TestUsageRemote: stead usage through a remote (http://) store counts
// what its refs name, shared content once, and shows the last push and
// pull noted; bad arguments exit 2.
func TestUsageRemote(t *testing.T) {
	t.Parallel()
	st := openStore(t, storeURL(t))
	ctx := t.Context()
	var keys []string
	for _, v := range []string{"layer-0123456789", "config"} {
		k, err := st.Blobs.Put(ctx, strings.NewReader(v))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.String())
	}
	for name, i := range map[string]int{"oci/app/_blobs/a": 0, "oci/app/_blobs/b": 1, "oci/app/_tags/v1": 0, "oci/else/_tags/v1": 1} {
		k := parseKeyT(t, keys[i])
		if _, err := st.Refs.Set(ctx, name, k, ref.SetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pushed := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	k := parseKeyT(t, keys[0])
	if err := st.NotePush(ctx, "oci/app/_", k, pushed); err != nil {
		t.Fatal(err)
	}
	if err := st.NotePull(ctx, "oci/app/_", k, pushed.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(server.New(st, server.Options{Logger: slog.New(slog.DiscardHandler)}))
	t.Cleanup(srv.Close)

	code, stdout, stderr := runIn(ctx, "--db", srv.URL, "usage", "oci/app/_", "--json")
	if code != 0 {
		t.Fatalf("stead usage --json = exit %d, stderr %q", code, stderr)
	}
	var u stead.Usage
	if err := json.Unmarshal([]byte(stdout), &u); err != nil {
		t.Fatal(err)
	}
	want := stead.Usage{Prefix: "oci/app/_", Refs: 3, Blobs: 2, Bytes: 22, ReferencedBytes: 38, DedupSavedBytes: 16,
		LastPush: pushed, LastPull: pushed.Add(time.Hour)}
	if u != want {
		t.Fatalf("usage through http:// = %+v, want %+v", u, want)
	}
	code, stdout, stderr = runIn(ctx, "--db", srv.URL, "usage", "oci/app/_")
	for _, line := range []string{"blobs        2", "dedup saved  16 bytes", "last push    2026-03-04T05:06:07Z", "last pull    2026-03-04T06:06:07Z"} {
		if code != 0 || !strings.Contains(stdout, line) {
			t.Fatalf("stead usage = exit %d, stdout %q (stderr %q), want a line %q", code, stdout, stderr, line)
		}
	}
	if code, stdout, _ := runIn(ctx, "--db", srv.URL, "usage", "nothing/"); code != 0 || strings.Contains(stdout, "last push") || !strings.Contains(stdout, "refs         0") {
		t.Fatalf("usage of an empty prefix = exit %d, %q", code, stdout)
	}
	if code, _, _ := runIn(ctx, "--db", srv.URL, "usage"); code != 2 {
		t.Fatalf("stead usage without a prefix = exit %d, want 2", code)
	}
}

func parseKeyT(t *testing.T, s string) blob.Key {
	t.Helper()
	k, err := blob.ParseKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
