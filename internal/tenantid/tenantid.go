// Package tenantid caches the ids of record tenants for the SQL engines,
// which store a record's tenant as an id. stead never renames or deletes a
// tenant row, so an id once read stays right for the engine's life; should
// one vanish all the same (a foreign-key error on use), Forget it and
// resolve it again.
package tenantid

import (
	"context"
	"sync"
)

// maxEntries bounds the cache; when full it starts over.
const maxEntries = 10_000

// Cache maps (group, tenant) to a tenant id. The zero value is ready to
// use; it is safe for concurrent use.
type Cache struct {
	mu  sync.RWMutex
	ids map[key]int64
}

type key struct{ group, tenant string }

// ID returns the id of tenant in group, calling resolve (which finds or
// creates the tenant row) on a miss.
func (c *Cache) ID(ctx context.Context, group, tenant string, resolve func(ctx context.Context, group, tenant string) (int64, error)) (int64, error) {
	k := key{group, tenant}
	c.mu.RLock()
	id, ok := c.ids[k]
	c.mu.RUnlock()
	if ok {
		return id, nil
	}
	id, err := resolve(ctx, group, tenant)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	if c.ids == nil || len(c.ids) >= maxEntries {
		c.ids = make(map[key]int64)
	}
	c.ids[k] = id
	c.mu.Unlock()
	return id, nil
}

// Forget drops the cached id of tenant in group.
func (c *Cache) Forget(group, tenant string) {
	c.mu.Lock()
	delete(c.ids, key{group, tenant})
	c.mu.Unlock()
}
