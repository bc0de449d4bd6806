package sqlengine

import "sync"

// maxTenants bounds a TenantCache; when full it starts over.
const maxTenants = 10_000

// TenantCache maps (group, tenant) to a record tenant's id: the SQL engines
// store a record's tenant as an id. An engine resolves a tenant it has not
// cached in the transaction of the save that uses it, and caches the id
// once that save commits. stead never renames or deletes a tenant row, so
// an id once cached stays right for the engine's life; should one vanish
// all the same (a foreign-key error on use), Forget it. The zero value is
// ready to use; it is safe for concurrent use.
type TenantCache struct {
	mu  sync.RWMutex
	ids map[tenantKey]int64
}

type tenantKey struct{ group, tenant string }

// ID returns the cached id of tenant in group, if any.
func (c *TenantCache) ID(group, tenant string) (int64, bool) {
	c.mu.RLock()
	id, ok := c.ids[tenantKey{group, tenant}]
	c.mu.RUnlock()
	return id, ok
}

// Add caches id as the id of tenant in group: a committed row's.
func (c *TenantCache) Add(group, tenant string, id int64) {
	c.mu.Lock()
	if c.ids == nil || len(c.ids) >= maxTenants {
		c.ids = make(map[tenantKey]int64)
	}
	c.ids[tenantKey{group, tenant}] = id
	c.mu.Unlock()
}

// Forget drops the cached id of tenant in group.
func (c *TenantCache) Forget(group, tenant string) {
	c.mu.Lock()
	delete(c.ids, tenantKey{group, tenant})
	c.mu.Unlock()
}
