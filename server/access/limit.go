package access

import (
	"container/list"
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
// are looked at. It keeps at most max buckets, evicting the one that
// failed least recently; each call is O(1) under its mutex, which is
// never held across a password check.
type limiter struct {
	mu      sync.Mutex
	burst   int
	every   time.Duration
	max     int
	clients map[string]*list.Element // of *bucket, most recent failure first
	order   list.List
}

type bucket struct {
	key string
	lim *rate.Limiter
}

// maxClients bounds the buckets kept. An attacker who fails from as many
// keys evicts its own bucket, and so gains FailBurst tries per maxClients
// failed logins (each a bcrypt comparison).
const maxClients = 10000

func newLimiter(burst int, every time.Duration) *limiter {
	return &limiter{burst: burst, every: every, max: maxClients, clients: map[string]*list.Element{}}
}

// allowed returns nil when key may try to log in at now, else an
// ErrTooManyAttempts that says how long until it may.
func (l *limiter) allowed(key string, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.clients[key]
	if !ok {
		return nil
	}
	if tokens := e.Value.(*bucket).lim.TokensAt(now); tokens < 1 {
		return &tooManyError{wait: time.Duration((1 - tokens) * float64(l.every))}
	}
	return nil
}

// failed counts a failed login of key at now.
func (l *limiter) failed(key string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.clients[key]
	if ok {
		l.order.MoveToFront(e)
	} else {
		for l.order.Len() >= l.max {
			oldest := l.order.Back()
			delete(l.clients, oldest.Value.(*bucket).key)
			l.order.Remove(oldest)
		}
		e = l.order.PushFront(&bucket{key, rate.NewLimiter(rate.Every(l.every), l.burst)})
		l.clients[key] = e
	}
	e.Value.(*bucket).lim.AllowN(now, 1)
}

// len is the number of buckets kept; has reports whether key's is.
func (l *limiter) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.clients)
}

func (l *limiter) has(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.clients[key]
	return ok
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
