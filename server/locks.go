package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/steadkit/stead/internal/validate"
	"github.com/steadkit/stead/internal/wire"
	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/steaderr"
)

// lockArgs checks a lock request's name, owner and (when ttl is wanted)
// TTL, truncated to whole microseconds as the engine seam expects.
func (s *Server) lockArgs(r *http.Request, req *wire.LockRequest, ttl bool) (name string, now time.Time, err error) {
	name = r.PathValue("name")
	if err := validate.Name("lock name", name); err != nil {
		return "", time.Time{}, err
	}
	if err := validate.Name("lock owner", req.Owner); err != nil {
		return "", time.Time{}, err
	}
	req.TTL = wire.Duration(time.Duration(req.TTL).Truncate(time.Microsecond))
	if ttl && req.TTL <= 0 {
		return "", time.Time{}, fmt.Errorf("%w: ttl %v: want at least 1µs", steaderr.ErrInvalidArgument, time.Duration(req.TTL))
	}
	if req.Wait < 0 || time.Duration(req.Wait) > maxLockWait {
		return "", time.Time{}, fmt.Errorf("%w: wait %v: want 0 to %v", steaderr.ErrInvalidArgument, time.Duration(req.Wait), maxLockWait)
	}
	now, err = s.clock(req.Now)
	if err != nil {
		return "", time.Time{}, err
	}
	if !now.IsZero() && req.Wait > 0 {
		return "", time.Time{}, &badRequest{`"now" and "wait" cannot be combined`}
	}
	return name, now.Truncate(time.Microsecond), nil
}

// readLock reads and checks a lock request, answering any error; ok is
// false when it did.
func (s *Server) readLock(w http.ResponseWriter, r *http.Request, ttl bool) (req wire.LockRequest, name string, now time.Time, ok bool) {
	err := s.readJSON(w, r, &req)
	if err == nil {
		name, now, err = s.lockArgs(r, &req, ttl)
	}
	if err != nil {
		s.fail(w, r, err)
		return req, "", time.Time{}, false
	}
	return req, name, now, true
}

// writeLost answers 409 lost: the grant (owner, token) is no longer the
// lock's.
func (s *Server) writeLost(w http.ResponseWriter, name string, req wire.LockRequest) {
	s.metrics.lockLost()
	writeJSON(w, http.StatusConflict, wire.LockGrant{
		Name: name, Owner: req.Owner, Token: req.Token,
		Error: fmt.Sprintf("lock %q: grant %d of %q is no longer current", name, req.Token, req.Owner), Code: wire.CodeLost,
	})
}

// acquireLock grants the lock if it is free, waiting up to "wait" for
// it: 200 with the grant, or 409 held with the holder's token and expiry
// as far as they could be read.
func (s *Server) acquireLock(w http.ResponseWriter, r *http.Request) {
	req, name, now, ok := s.readLock(w, r, true)
	if !ok {
		return
	}
	if req.Wait > 0 {
		s.wait(w, time.Duration(req.Wait))
		ctx, cancel := s.waitContext(r, time.Duration(req.Wait))
		lk, err := s.locks.Lock(ctx, name, req.Owner, time.Duration(req.TTL))
		waitOver := ctx.Err() != nil && r.Context().Err() == nil
		cancel()
		switch {
		case err == nil:
			s.metrics.lockAcquired(true)
			writeJSON(w, http.StatusOK, wire.LockGrant{Granted: true, Name: name, Owner: req.Owner, Token: lk.Token(), Expiry: lk.Expiry()})
			return
		case !waitOver:
			s.fail(w, r, err)
			return
		}
		// The wait ran out: one last try, which also reads the holder.
	}
	res, err := s.eng.Locks().Acquire(r.Context(), lock.AcquireParams{Name: name, Owner: req.Owner, TTL: time.Duration(req.TTL), Now: now})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.metrics.lockAcquired(res.Granted)
	g := wire.LockGrant{Granted: res.Granted, Name: name, Owner: res.Grant.Owner, Token: res.Grant.Token, Expiry: res.Grant.Expiry, Now: res.Now}
	if !res.Granted {
		g.Error, g.Code = fmt.Sprintf("lock %q is held by another owner", name), wire.CodeHeld
		writeJSON(w, http.StatusConflict, g)
		return
	}
	writeJSON(w, http.StatusOK, g)
}

// renewLock extends the grant (owner, token) by ttl: 200 with the new
// expiry, or 409 lost when the grant is no longer the lock's.
func (s *Server) renewLock(w http.ResponseWriter, r *http.Request) {
	req, name, now, ok := s.readLock(w, r, true)
	if !ok {
		return
	}
	expiry, renewed, err := s.eng.Locks().Renew(r.Context(), lock.RenewParams{Name: name, Owner: req.Owner, Token: req.Token, TTL: time.Duration(req.TTL), Now: now})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !renewed {
		s.writeLost(w, name, req)
		return
	}
	writeJSON(w, http.StatusOK, wire.LockGrant{Granted: true, Name: name, Owner: req.Owner, Token: req.Token, Expiry: expiry})
}

// releaseLock frees the lock when (owner, token) is its current grant:
// 200, or 409 lost when it is not.
func (s *Server) releaseLock(w http.ResponseWriter, r *http.Request) {
	req, name, _, ok := s.readLock(w, r, false)
	if !ok {
		return
	}
	released, err := s.eng.Locks().Release(r.Context(), lock.ReleaseParams{Name: name, Owner: req.Owner, Token: req.Token})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !released {
		s.writeLost(w, name, req)
		return
	}
	writeJSON(w, http.StatusOK, wire.LockGrant{Released: true, Name: name, Owner: req.Owner, Token: req.Token})
}
