package cli

import (
	"bytes"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http/httptest"
	neturl "net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/server"
)

// TestObjectsThroughHTTP checks that get, gc explain and doctor see a
// value kept as a bucket object the same through a server as directly.
func TestObjectsThroughHTTP(t *testing.T) {
	t.Parallel()
	bucket := t.TempDir()
	url := "sqlite://" + filepath.Join(t.TempDir(), "stead.db") + "?bytes=" + neturl.QueryEscape("file://"+filepath.ToSlash(bucket))
	st := openStore(t, url)
	value := make([]byte, 2*blob.InlineLimit+3)
	_, _ = rand.NewChaCha8([32]byte{9}).Read(value)
	key, err := st.Blobs.Put(t.Context(), bytes.NewReader(value))
	if err != nil {
		t.Fatal(err)
	}
	stored, err := st.Engine().Blobs().Get(t.Context(), key)
	if err != nil || stored.Object == "" {
		t.Fatalf("the value is stored as %+v (%v), want an object", stored, err)
	}
	srv := httptest.NewServer(server.New(st, server.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(srv.Close)
	objectLine := regexp.MustCompile(`(?m)^object\s+` + regexp.QuoteMeta(stored.Object) + `$`)
	tierLine := regexp.MustCompile(`(?m)^ok\s+bytes tier\s+file://.*probe object$`)
	for _, db := range []string{url, srv.URL} {
		out := filepath.Join(t.TempDir(), "value")
		if code, _, errOut := run(t, t.Context(), "--db", db, "get", key.String(), "-o", out); code != 0 {
			t.Errorf("get --db %s = exit %d, %q", db, code, errOut)
		} else if got, err := os.ReadFile(out); err != nil || !bytes.Equal(got, value) {
			t.Errorf("get --db %s wrote %d bytes (%v), want the value's %d", db, len(got), err, len(value))
		}
		if code, stdout, errOut := run(t, t.Context(), "--db", db, "gc", "explain", key.String()); code != 0 || !objectLine.MatchString(stdout) {
			t.Errorf("gc explain --db %s = exit %d, %q, %q; want it to name object %s", db, code, stdout, errOut, stored.Object)
		}
		if _, stdout, errOut := run(t, t.Context(), "--db", db, "doctor"); !tierLine.MatchString(stdout) || strings.Contains(stdout, "fail") {
			t.Errorf("doctor --db %s = %q, %q; want the bytes tier probed", db, stdout, errOut)
		}
	}
}
