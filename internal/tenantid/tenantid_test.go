package tenantid

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestCache(t *testing.T) {
	t.Parallel()
	var c Cache
	ctx := t.Context()
	resolved := 0
	resolve := func(_ context.Context, group, tenant string) (int64, error) {
		resolved++
		if group == "unknown" {
			return 0, errors.New("no such group")
		}
		return int64(resolved), nil
	}
	id := func(group, tenant string) int64 {
		t.Helper()
		v, err := c.ID(ctx, group, tenant, resolve)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	first := id("g", "")
	if again := id("g", ""); again != first || resolved != 1 {
		t.Fatalf("a hit resolved again: %d, %d (resolved %d times)", first, again, resolved)
	}
	if other := id("h", ""); other == first {
		t.Fatal("tenants of two groups share an id")
	}
	if _, err := c.ID(ctx, "unknown", "", resolve); err == nil {
		t.Fatal("an error from resolve was cached away")
	}
	c.Forget("g", "")
	if after := id("g", ""); after == first {
		t.Fatal("Forget kept the id")
	}
	for i := range maxEntries + 1 { // a full cache starts over
		id("g", fmt.Sprint(i))
	}
	if len(c.ids) > maxEntries {
		t.Fatalf("cache holds %d entries, limit %d", len(c.ids), maxEntries)
	}
}
