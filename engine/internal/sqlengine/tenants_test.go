package sqlengine

import (
	"fmt"
	"testing"
)

func TestTenantCache(t *testing.T) {
	t.Parallel()
	var c TenantCache
	if _, ok := c.ID("g", ""); ok {
		t.Fatal("an empty cache has an id")
	}
	c.Add("g", "", 1)
	c.Add("h", "", 2)
	if id, ok := c.ID("g", ""); !ok || id != 1 {
		t.Fatalf("ID(g, \"\") = %d, %v; want 1", id, ok)
	}
	if id, ok := c.ID("h", ""); !ok || id != 2 {
		t.Fatalf("tenants of two groups share an entry: ID(h, \"\") = %d, %v; want 2", id, ok)
	}
	c.Forget("g", "")
	if _, ok := c.ID("g", ""); ok {
		t.Fatal("Forget kept the id")
	}
	for i := range maxTenants + 1 { // a full cache starts over
		c.Add("g", fmt.Sprint(i), int64(i))
	}
	if len(c.ids) > maxTenants {
		t.Fatalf("cache holds %d entries, limit %d", len(c.ids), maxTenants)
	}
}
