package access

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limiter bounds failed logins per client: a token bucket each, which a
// failure drains and time refills. A client whose bucket is empty is
// refused before its credentials are looked at.
type limiter struct {
	mu      sync.Mutex
	burst   int
	every   time.Duration
	clients map[string]*rate.Limiter
}

// maxClients bounds the buckets kept: past it, the full ones (clients
// that have not failed lately) are dropped.
const maxClients = 10000

func newLimiter(burst int, every time.Duration) *limiter {
	return &limiter{burst: burst, every: every, clients: map[string]*rate.Limiter{}}
}

// allowed reports whether client may try to log in at now.
func (l *limiter) allowed(client string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.clients[client]
	return !ok || b.TokensAt(now) >= 1
}

// failed counts a failed login of client at now.
func (l *limiter) failed(client string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.clients[client]
	if !ok {
		if len(l.clients) >= maxClients {
			for c, b := range l.clients {
				if b.TokensAt(now) >= float64(l.burst) {
					delete(l.clients, c)
				}
			}
		}
		b = rate.NewLimiter(rate.Every(l.every), l.burst)
		l.clients[client] = b
	}
	b.AllowN(now, 1)
}
