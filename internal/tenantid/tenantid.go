// Package tenantid caches the ids of record tenants for the SQL engines,
// which store a record's tenant as an id. An engine resolves a tenant it
// has not cached in the transaction of the save that uses it, and caches
// the id once that save commits. stead never renames or deletes a tenant
// row, so an id once cached stays right for the engine's life; should one
// vanish all the same (a foreign-key error on use), Forget it.
package tenantid

import "sync"

// maxEntries bounds the cache; when full it starts over.
const maxEntries = 10_000

// Cache maps (group, tenant) to a tenant id. The zero value is ready to
// use; it is safe for concurrent use.
type Cache struct {
	mu  sync.RWMutex
	ids map[key]int64
}

type key struct{ group, tenant string }

// ID returns the cached id of tenant in group, if any.
func (c *Cache) ID(group, tenant string) (int64, bool) {
	c.mu.RLock()
	id, ok := c.ids[key{group, tenant}]
	c.mu.RUnlock()
	return id, ok
}

// Add caches id as the id of tenant in group: a committed row's.
func (c *Cache) Add(group, tenant string, id int64) {
	c.mu.Lock()
	if c.ids == nil || len(c.ids) >= maxEntries {
		c.ids = make(map[key]int64)
	}
	c.ids[key{group, tenant}] = id
	c.mu.Unlock()
}

// Forget drops the cached id of tenant in group.
func (c *Cache) Forget(group, tenant string) {
	c.mu.Lock()
	delete(c.ids, key{group, tenant})
	c.mu.Unlock()
}
