package server_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/internal/testing/apicheck"
	"github.com/steadkit/stead/server"
)

// listServer returns a server over a memory store holding n blobs, put
// straight into the store, with their keys in order.
func listServer(t *testing.T, n int) (*httptest.Server, *stead.Store, []string) {
	t.Helper()
	st, err := stead.Open(context.Background(), "mem://")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	keys := putBlobs(t, st, "listed", n)
	srv := httptest.NewServer(apicheck.Load(t).Wrap(t, server.New(st, server.Options{Logger: quiet})))
	t.Cleanup(srv.Close)
	return srv, st, keys
}

// putBlobs puts n distinct blobs named after prefix into st and returns
// their keys in order.
func putBlobs(t *testing.T, st *stead.Store, prefix string, n int) []string {
	t.Helper()
	keys := make([]string, n)
	for i := range keys {
		key, err := st.Blobs.Put(context.Background(), strings.NewReader(fmt.Sprint(prefix, i)))
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = key.String()
	}
	slices.Sort(keys)
	return keys
}

// blobPage is the answer of GET /v1/blobs.
type blobPage struct {
	Blobs []struct {
		Key  string
		Size int64
	}
	Next string
}

// listPage gets one page of GET /v1/blobs with query, failing t on any
// answer but a 200 holding a page.
func listPage(t *testing.T, base, query string) blobPage {
	t.Helper()
	a := do(t, "GET", base+"/v1/blobs?"+query, "", nil)
	var page blobPage
	if a.status != 200 || json.Unmarshal([]byte(a.body), &page) != nil {
		t.Fatalf("GET /v1/blobs?%s = %d %s", query, a.status, a.body)
	}
	return page
}

// walkPages lists the whole store a page at a time with limit (none when
// empty), following next, calling between before each page after the
// first; it returns the keys listed and the number of pages. Each page
// must hold limit keys, in order after its cursor, and name its last key
// as next, or hold fewer and name none.
func walkPages(t *testing.T, base, limit string, want int, between func()) ([]string, int) {
	t.Helper()
	var keys []string
	after := ""
	for pages := 1; ; pages++ {
		if pages > 1 && between != nil {
			between()
		}
		q := url.Values{}
		if limit != "" {
			q.Set("limit", limit)
		}
		if after != "" {
			q.Set("after", after)
		}
		page := listPage(t, base, q.Encode())
		last := after
		for _, b := range page.Blobs {
			if b.Key <= last {
				t.Fatalf("page %d lists %s after %s", pages, b.Key, last)
			}
			last = b.Key
			keys = append(keys, b.Key)
		}
		switch {
		case len(page.Blobs) > want:
			t.Fatalf("page %d holds %d keys, want at most %d", pages, len(page.Blobs), want)
		case len(page.Blobs) == want && page.Next != last:
			t.Fatalf("full page %d names next %q, want its last key %s", pages, page.Next, last)
		case len(page.Blobs) < want && page.Next != "":
			t.Fatalf("short page %d names next %q, want none", pages, page.Next)
		}
		if page.Next == "" {
			return keys, pages
		}
		after = page.Next
		if pages > 10000 {
			t.Fatal("paging does not end")
		}
	}
}

// TestBlobListPages walks stores across page boundaries: empty, exactly
// one or two pages, one key more, with a limit and with none (a page is
// blob.DefaultPageSize keys). Every key is listed once, in order; a
// store of exactly k pages answers a last, empty page.
func TestBlobListPages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		blobs int
		limit string
		size  int
	}{
		{0, "3", 3},
		{1, "3", 3},
		{3, "3", 3},
		{4, "3", 3},
		{6, "3", 3},
		{7, "3", 3},
		{5, "1", 1},
		{5, "10000", 10000},
		{0, "", blob.DefaultPageSize},
		{blob.DefaultPageSize, "", blob.DefaultPageSize},
		{blob.DefaultPageSize + 1, "", blob.DefaultPageSize},
	} {
		t.Run(fmt.Sprintf("%d blobs, limit %q", tc.blobs, tc.limit), func(t *testing.T) {
			t.Parallel()
			srv, _, want := listServer(t, tc.blobs)
			got, pages := walkPages(t, srv.URL, tc.limit, tc.size, nil)
			if !slices.Equal(got, want) {
				t.Fatalf("listed %d keys, want the %d stored, in order", len(got), len(want))
			}
			if wantPages := tc.blobs/tc.size + 1; pages != wantPages {
				t.Fatalf("listed in %d pages, want %d", pages, wantPages)
			}
		})
	}
}

// TestBlobListCursors lists after cursors: none (empty), a stored key,
// and keys not stored: below every key, above every key, just below and
// just above a stored one.
func TestBlobListCursors(t *testing.T) {
	t.Parallel()
	srv, _, keys := listServer(t, 5)
	// near returns the key next to key by one in its digest's last byte
	// (the stored keys are hashes: none is at either end).
	near := func(key string, by int) string {
		k, err := blob.ParseKey(key)
		if err != nil {
			t.Fatal(err)
		}
		d := k.Digest()
		d[31] = byte(int(d[31]) + by)
		return "sha256:" + hex.EncodeToString(d[:])
	}
	for _, tc := range []struct {
		after string
		want  []string
	}{
		{"", keys},
		{"sha256:" + strings.Repeat("0", 64), keys},
		{"sha256:" + strings.Repeat("f", 64), nil},
		{keys[2], keys[3:]},
		{near(keys[2], -1), keys[2:]},
		{near(keys[2], +1), keys[3:]},
	} {
		page := listPage(t, srv.URL, "after="+tc.after)
		var got []string
		for _, b := range page.Blobs {
			got = append(got, b.Key)
		}
		if !slices.Equal(got, tc.want) || page.Next != "" {
			t.Errorf("after %s: listed %v next %q, want %v and no next", tc.after, got, page.Next, tc.want)
		}
	}
}

// TestBlobListRefuses: a limit out of 1 to 10000 (0, which once meant the
// whole store, among them) or a cursor that is not a key is 400 with the
// error's code, whatever the store holds.
func TestBlobListRefuses(t *testing.T) {
	t.Parallel()
	srv, _, _ := listServer(t, 3)
	for _, tc := range []struct{ query, code string }{
		{"limit=0", "invalid_argument"},
		{"limit=-1", "invalid_argument"},
		{"limit=10001", "invalid_argument"},
		{"limit=99999999999999999999", "invalid_argument"},
		{"limit=banana", "invalid_argument"},
		{"limit=1.5", "invalid_argument"},
		{"limit=0x10", "invalid_argument"},
		{"limit=0&after=sha256:" + strings.Repeat("0", 64), "invalid_argument"},
		{"after=x", "invalid_key"},
		{"after=sha256:", "invalid_key"},
		{"after=sha256:" + strings.Repeat("A", 64), "invalid_key"},
		{"after=sha256:" + strings.Repeat("0", 63), "invalid_key"},
		{"after=sha256:" + strings.Repeat("0", 65), "invalid_key"},
		{"after=sha512:" + strings.Repeat("0", 128), "invalid_key"},
		{"after=sha256:" + strings.Repeat("0", 63) + "%00", "invalid_key"},
		{"after=" + url.QueryEscape("sha256:"+strings.Repeat("0", 64)+"/../x"), "invalid_key"},
		{"after=sha256:" + strings.Repeat("0", 32<<10), "invalid_key"},
		{"after=" + strings.Repeat("%FF", 8<<10), "invalid_key"},
	} {
		a := do(t, "GET", srv.URL+"/v1/blobs?"+tc.query, "", nil)
		if a.status != 400 || a.errCode(t) != tc.code {
			t.Errorf("GET /v1/blobs?%.80s = %d %.200s, want 400 %s", tc.query, a.status, a.body, tc.code)
		}
	}
}

// TestBlobListWhilePuts walks the store a page at a time while blobs are
// put, between pages and from other goroutines: every key stored before
// the walk began (none is deleted) is listed exactly once, and the walk
// is in key order throughout.
func TestBlobListWhilePuts(t *testing.T) {
	t.Parallel()
	srv, st, before := listServer(t, 60)
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := range 40 {
				if a := do(t, "PUT", srv.URL+"/v1/blobs", fmt.Sprint("concurrent ", w, " ", i), nil); a.status != 201 {
					t.Errorf("concurrent PUT = %d %s", a.status, a.body)
					return
				}
			}
		})
	}
	round := 0
	between := func() {
		round++
		putBlobs(t, st, fmt.Sprint("between ", round, " "), 3)
	}
	got, _ := walkPages(t, srv.URL, "7", 7, between)
	wg.Wait()
	listed := map[string]int{}
	for _, k := range got {
		listed[k]++
	}
	for _, k := range before {
		if listed[k] != 1 {
			t.Errorf("%s, stored before the walk, listed %d times", k, listed[k])
		}
	}
}
