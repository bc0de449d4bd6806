package remote_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote"
	"github.com/steadkit/stead/engine/remote/wire"
)

// TestListLongerThanAPage: a listing longer than a server's page
// (wire.MaxListLimit) is walked a page at a time, each request within the
// bound, and the listing is whole and in order; it stops at a short page,
// and when yield says stop. The server pages a made-up store of keys as
// GET /v1/blobs does (the server's own paging: server/bloblist_test.go).
func TestListLongerThanAPage(t *testing.T) {
	t.Parallel()
	const n = wire.MaxListLimit + 2
	ctx := context.Background()
	want := make([]blob.Key, n)
	for i := range want {
		want[i] = blob.KeyOf([]byte(strconv.Itoa(i)))
	}
	slices.SortFunc(want, blob.Key.Compare)
	var (
		mu     sync.Mutex
		limits []int // the limit of each page asked for
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/info" {
			json.NewEncoder(w).Encode(wire.Info{})
			return
		}
		q := r.URL.Query()
		limit, err := strconv.Atoi(q.Get("limit"))
		if r.URL.Path != "/v1/blobs" || err != nil || limit < 1 || limit > wire.MaxListLimit {
			http.Error(w, "not a page request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		limits = append(limits, limit)
		mu.Unlock()
		from := 0
		if after := q.Get("after"); after != "" {
			from = sort.Search(n, func(i int) bool { return want[i].String() > after })
		}
		page := wire.BlobPage{Blobs: []wire.BlobInfo{}}
		for _, k := range want[from:min(n, from+limit)] {
			page.Blobs = append(page.Blobs, wire.BlobInfo{Key: k.String(), Size: 1})
		}
		if len(page.Blobs) == limit {
			page.Next = page.Blobs[limit-1].Key
		}
		json.NewEncoder(w).Encode(page)
	}))
	t.Cleanup(srv.Close)
	eng, err := remote.Open(ctx, remote.Config{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	for _, tc := range []struct {
		after  blob.Key
		limit  int
		stop   int // yield says stop after this many; 0: never
		want   []blob.Key
		limits []int
	}{
		{limit: n - 1, want: want[:n-1], limits: []int{wire.MaxListLimit, 1}},
		{limit: 3 * wire.MaxListLimit, want: want, limits: []int{wire.MaxListLimit, wire.MaxListLimit}},
		{after: want[1], limit: 2 * wire.MaxListLimit, want: want[2:], limits: []int{wire.MaxListLimit, wire.MaxListLimit}},
		{limit: 2 * wire.MaxListLimit, stop: 5, want: want[:5], limits: []int{wire.MaxListLimit}},
	} {
		mu.Lock()
		limits = nil
		mu.Unlock()
		var got []blob.Key
		err := eng.Blobs().List(ctx, tc.after, tc.limit, func(info blob.Info) bool {
			got = append(got, info.Key)
			return len(got) != tc.stop
		})
		name := fmt.Sprintf("List(after %s, limit %d, stop after %d)", tc.after, tc.limit, tc.stop)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s listed %d keys, want %d, in order", name, len(got), len(tc.want))
		}
		mu.Lock()
		asked := limits
		mu.Unlock()
		if !slices.Equal(asked, tc.limits) {
			t.Errorf("%s asked for pages of %v, want %v", name, asked, tc.limits)
		}
	}
}
