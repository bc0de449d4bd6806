package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/lock"
)

// lockArgs checks a lock request as lock.Store checks its calls (name,
// owner and, when ttl is wanted, the TTL, truncated to whole microseconds
// as the engine seam expects), then the wait and the clock, which are the
// server's.
func (s *Server) lockArgs(r *http.Request, req *wire.LockRequest, ttl bool) (name string, now time.Time, err error) {
	name = r.PathValue("name")
	if ttl {
		var d time.Duration
		d, err = lock.CheckAcquire(name, req.Owner, time.Duration(req.TTL))
		req.TTL = wire.Duration(d)
	} else {
		err = lock.CheckRelease(name, req.Owner)
	}
	if err != nil {
		return "", time.Time{}, err
	}
	if req.Wait < 0 || time.Duration(req.Wait) > maxLockWait {
		return "", time.Time{}, invalidArgument("wait %v: want 0 to %v", time.Duration(req.Wait), maxLockWait)
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
	w.Header().Set(wire.CodeHeader, wire.CodeLost)
	writeJSON(w, http.StatusConflict, wire.LockGrant{
		Name: name, Owner: req.Owner, Token: req.Token,
		Error: fmt.Sprintf("lock %q: grant %d of %q is no longer current", name, req.Token, req.Owner), Code: wire.CodeLost,
	})
}

// acquireLock grants the lock if it is free, waiting up to "wait" for
// it: 200 with the grant, or 409 held with the holder's token and expiry
// as far as they could be read. A new grant the client cannot receive
// (it left, or the answer could not be written) is released.
func (s *Server) acquireLock(w http.ResponseWriter, r *http.Request) {
	req, name, now, ok := s.readLock(w, r, true)
	if !ok {
		return
	}
	ttl := time.Duration(req.TTL)
	p := lock.AcquireParams{Name: name, Owner: req.Owner, TTL: ttl, Now: now}
	res, err := s.eng.Locks().Acquire(r.Context(), p)
	if err == nil && !res.Granted && req.Wait > 0 {
		s.wait(w, time.Duration(req.Wait))
		ctx, cancel := s.waitContext(r, time.Duration(req.Wait))
		spy := &grantSpy{Backend: s.eng.Locks()}
		lk, werr := lock.NewStore(spy, lock.Options{}).Lock(ctx, name, req.Owner, ttl)
		waitOver := ctx.Err() != nil && r.Context().Err() == nil
		cancel()
		switch {
		case werr == nil:
			s.metrics.lockAcquired(true)
			s.deliverGrant(w, r, wire.LockGrant{Granted: true, New: spy.new, Name: name, Owner: req.Owner, Token: lk.Token(), Expiry: lk.Expiry()})
			return
		case !waitOver:
			s.fail(w, r, werr)
			return
		}
		// The wait ran out: one last try, which also reads the holder.
		res, err = s.eng.Locks().Acquire(r.Context(), p)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.metrics.lockAcquired(res.Granted)
	g := wire.LockGrant{Granted: res.Granted, New: res.New, Name: name, Owner: res.Grant.Owner, Token: res.Grant.Token, Expiry: res.Grant.Expiry, Now: res.Now}
	if !res.Granted {
		g.Error, g.Code = fmt.Sprintf("lock %q is held by another owner", name), wire.CodeHeld
		w.Header().Set(wire.CodeHeader, wire.CodeHeld)
		writeJSON(w, http.StatusConflict, g)
		return
	}
	s.deliverGrant(w, r, g)
}

// grantSpy is a lock.Backend that remembers whether the last grant its
// Acquire returned was new: what a Store's Lock, which returns only the
// grant, leaves out. Lock calls Acquire from one goroutine.
type grantSpy struct {
	lock.Backend
	new bool
}

func (g *grantSpy) Acquire(ctx context.Context, p lock.AcquireParams) (lock.AcquireResult, error) {
	res, err := g.Backend.Acquire(ctx, p)
	if err == nil && res.Granted {
		g.new = res.New
	}
	return res, err
}

// deliverGrant answers 200 with g. When g is new (g.New) and the client
// cannot have received it, because its request ended before the answer
// or writing the answer failed, the grant is released: nobody would know
// its token until it expired. The answer is flushed so that a broken
// connection shows here rather than after the handler returns; a writer
// that cannot flush (a middleware's, http.ErrNotSupported) says nothing
// about delivery, so its answer counts as delivered.
func (s *Server) deliverGrant(w http.ResponseWriter, r *http.Request, g wire.LockGrant) {
	if g.New && clientGone(r) {
		s.releaseUndelivered(r, g)
		return
	}
	b, _ := json.Marshal(g)
	b = append(b, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(b)
	if err == nil {
		if err = http.NewResponseController(w).Flush(); errors.Is(err, http.ErrNotSupported) {
			err = nil
		}
	}
	if err != nil && g.New {
		s.releaseUndelivered(r, g)
	}
}

// releaseUndelivered releases a grant its client never received.
func (s *Server) releaseUndelivered(r *http.Request, g wire.LockGrant) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.dbTimeout())
	defer cancel()
	if _, err := s.eng.Locks().Release(ctx, lock.ReleaseParams{Name: g.Name, Owner: g.Owner, Token: g.Token}); err != nil {
		s.log.Warn("releasing a lock grant the client never received", "lock", g.Name, "owner", g.Owner, "token", g.Token, "err", err)
	}
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

// listLocks answers a page of the live grants of locks whose names start
// with "prefix", in name order, after the "after" name: limit 1 to
// lock.MaxList, default defaultRecords.
func (s *Server) listLocks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := queryInt(q.Get("limit"), defaultRecords)
	var now time.Time
	if err == nil {
		now, err = s.queryNow(r)
	}
	var grants []lock.Grant
	if err == nil {
		var opts lock.Options
		if !now.IsZero() {
			opts.Now = func() time.Time { return now }
		}
		grants, err = lock.NewStore(s.eng.Locks(), opts).ListHeld(r.Context(), q.Get("prefix"), q.Get("after"), limit)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.HeldLocks{Locks: make([]wire.HeldLock, len(grants))}
	for i, g := range grants {
		out.Locks[i] = wire.HeldLock{Name: g.Name, Owner: g.Owner, Token: g.Token, Expiry: g.Expiry}
	}
	if len(grants) == limit {
		out.Next = grants[len(grants)-1].Name
	}
	writeJSON(w, http.StatusOK, out)
}
