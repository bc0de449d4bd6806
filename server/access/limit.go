package access

import (
	"errors"
	"math"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limiter bounds failed logins per key (a client address and the user
// name it tried): a token bucket each, which a failure drains and time
// refills. A key whose bucket is empty is refused before its credentials
// are looked at.
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

// allowed returns nil when key may try to log in at now, else an
// ErrTooManyAttempts that says how long until it may.
func (l *limiter) allowed(key string, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.clients[key]
	if !ok {
		return nil
	}
	if tokens := b.TokensAt(now); tokens < 1 {
		return &tooManyError{wait: time.Duration((1 - tokens) * float64(l.every))}
	}
	return nil
}

// failed counts a failed login of key at now.
func (l *limiter) failed(key string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.clients[key]
	if !ok {
		if len(l.clients) >= maxClients {
			for c, b := range l.clients {
				if b.TokensAt(now) >= float64(l.burst) {
					delete(l.clients, c)
				}
			}
		}
		b = rate.NewLimiter(rate.Every(l.every), l.burst)
		l.clients[key] = b
	}
	b.AllowN(now, 1)
}

// tooManyError is ErrTooManyAttempts with the wait until the next try.
type tooManyError struct{ wait time.Duration }

func (e *tooManyError) Error() string        { return ErrTooManyAttempts.Error() }
func (e *tooManyError) Is(target error) bool { return target == ErrTooManyAttempts }

// RetryAfter is the Retry-After value of an ErrTooManyAttempts: the
// whole seconds until its bucket holds a login again, at least 1; "" for
// another error.
func RetryAfter(err error) string {
	var e *tooManyError
	switch {
	case errors.As(err, &e):
		return strconv.Itoa(max(1, int(math.Ceil(e.wait.Seconds()))))
	case errors.Is(err, ErrTooManyAttempts):
		return "1"
	}
	return ""
}
