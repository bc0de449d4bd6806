package memory

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/internal/wake"
	"github.com/steadkit/stead/lock"
)

// locks holds one row per name ever granted; a released row keeps its
// token, the name's counter.
type locks struct {
	e *Engine
	// mu guards rows; every method checks for Close while holding it.
	mu   sync.Mutex
	rows map[string]*lockRow
	// released wakes the watchers of a name when it is released.
	released wake.Hub
}

type lockRow struct {
	owner  string // "" when released
	token  int64
	expiry time.Time
}

func (l *locks) Acquire(ctx context.Context, p lock.AcquireParams) (lock.AcquireResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.e.check(ctx); err != nil {
		return lock.AcquireResult{}, err
	}
	now := clock.OrNow(p.Now)
	row := l.rows[p.Name]
	if row == nil {
		row = &lockRow{}
		l.rows[p.Name] = row
	}
	live := row.owner != "" && now.Before(row.expiry)
	switch {
	case live && row.owner != p.Owner:
		return lock.AcquireResult{Grant: row.grant(p.Name), Now: now}, nil
	case !live:
		row.owner, row.token, row.expiry = p.Owner, row.token+1, now.Add(p.TTL)
	}
	// Otherwise re-acquired by its live holder: unchanged.
	return lock.AcquireResult{Granted: true, New: !live, Grant: row.grant(p.Name), Now: now}, nil
}

func (r *lockRow) grant(name string) lock.Grant {
	return lock.Grant{Name: name, Owner: r.owner, Token: r.token, Expiry: r.expiry}
}

// current returns the row of the grant (name, owner, token), or nil when
// that grant is not the name's current one.
func (l *locks) current(name, owner string, token int64) *lockRow {
	row := l.rows[name]
	if row == nil || row.owner != owner || row.token != token {
		return nil
	}
	return row
}

func (l *locks) Renew(ctx context.Context, p lock.RenewParams) (time.Time, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.e.check(ctx); err != nil {
		return time.Time{}, false, err
	}
	row := l.current(p.Name, p.Owner, p.Token)
	if row == nil {
		return time.Time{}, false, nil
	}
	row.expiry = clock.OrNow(p.Now).Add(p.TTL)
	return row.expiry, true, nil
}

func (l *locks) Release(ctx context.Context, p lock.ReleaseParams) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.e.check(ctx); err != nil {
		return false, err
	}
	row := l.current(p.Name, p.Owner, p.Token)
	if row == nil {
		return false, nil
	}
	row.owner, row.expiry = "", time.Time{}
	l.released.Wake(p.Name)
	return true, nil
}

// WatchReleases sees every release: all of them happen in this process.
func (l *locks) WatchReleases(ctx context.Context, name string) (<-chan struct{}, bool, func(), error) {
	if err := l.e.check(ctx); err != nil {
		return nil, false, func() {}, err
	}
	ch, stop := l.released.Subscribe(name)
	return ch, true, stop, nil
}

func (l *locks) ListHeld(ctx context.Context, p lock.ListParams) ([]lock.Grant, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.e.check(ctx); err != nil {
		return nil, err
	}
	now := clock.OrNow(p.Now)
	var out []lock.Grant
	for name, row := range l.rows {
		if name > p.After && strings.HasPrefix(name, p.Prefix) && row.owner != "" && now.Before(row.expiry) {
			out = append(out, row.grant(name))
		}
	}
	slices.SortFunc(out, func(a, b lock.Grant) int { return strings.Compare(a.Name, b.Name) })
	return out[:min(p.Limit, len(out))], nil
}

var _ lock.Backend = (*locks)(nil)
