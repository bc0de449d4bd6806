package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/internal/validate"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/steaderr"
)

// recordsAt returns the record store to serve a request naming now: the
// server's own, or one on that fixed instant.
func (s *Server) recordsAt(now time.Time) (*record.Store, error) {
	now, err := s.clock(now)
	if err != nil || now.IsZero() {
		return s.records, err
	}
	return record.NewStore(s.eng.Records(), record.Options{Now: func() time.Time { return now }}), nil
}

func writeRecord(w http.ResponseWriter, status int, rec record.Record) {
	w.Header().Set("ETag", wire.ETag(rec.Version))
	writeJSON(w, status, wire.FromRecord(rec))
}

func (s *Server) loadRecord(w http.ResponseWriter, r *http.Request) {
	rec, err := s.records.Load(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeRecord(w, http.StatusOK, rec)
}

// saveRecord is a compare-and-swap: If-Match "N" updates version N,
// If-None-Match * creates; neither is 428, a lost swap 412.
func (s *Server) saveRecord(w http.ResponseWriter, r *http.Request) {
	var version int64
	ifMatch, ifNone := r.Header.Get("If-Match"), r.Header.Get("If-None-Match")
	switch {
	case ifMatch != "" && ifNone != "":
		writeError(w, wire.CodeBadRequest, "send If-Match to update or If-None-Match: * to create, not both")
		return
	case ifMatch != "":
		v, err := wire.ParseETag(ifMatch)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		version = v
	case ifNone == "*":
	case ifNone != "":
		writeError(w, wire.CodeBadRequest, `If-None-Match on a save must be "*" (create)`)
		return
	default:
		writeError(w, wire.CodePreconditionRequired, `a save needs If-Match: "VERSION" to update or If-None-Match: * to create`)
		return
	}
	if r.ContentLength > maxRecordBody {
		s.fail(w, r, refuse(wire.CodeBodyTooLarge, "record save of %d bytes, limit %d", r.ContentLength, maxRecordBody))
		return
	}
	release, ok := s.uploadSlot(w, r)
	if !ok {
		return
	}
	defer release()
	// A save holds its declared length (the most it may be, when chunked)
	// of the record body budget, so a burst of large saves cannot take
	// the server's memory.
	weight := r.ContentLength
	if weight < 0 || weight > maxRecordBody {
		weight = maxRecordBody
	}
	if !s.recordBytes.TryAcquire(weight) {
		writeError(w, wire.CodeBusy, "too many large record saves in progress")
		return
	}
	defer s.recordBytes.Release(weight)
	var body wire.Record
	if err := s.readJSONLimit(w, r, &body, maxRecordBody); err != nil {
		s.fail(w, r, err)
		return
	}
	id := r.PathValue("id")
	if body.ID != "" && body.ID != id {
		writeError(w, wire.CodeBadRequest, "the body's id is not the URL's")
		return
	}
	if body.Version != 0 && body.Version != version {
		writeError(w, wire.CodeBadRequest, "the body's version is not If-Match's")
		return
	}
	rec := body.ToRecord()
	rec.ID, rec.Version = id, version
	st, err := s.recordsAt(body.Now)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	stored, err := st.Save(r.Context(), rec)
	if errors.Is(err, steaderr.ErrConflict) {
		s.metrics.recordSave(false)
		s.fail(w, r, &preconditionFailed{err: err})
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.metrics.recordSave(true)
	status := http.StatusOK
	if version == 0 {
		status = http.StatusCreated
		w.Header().Set("Location", "/v1/records/"+r.PathValue("id"))
	}
	writeRecord(w, status, stored)
}

func (s *Server) deleteRecord(w http.ResponseWriter, r *http.Request) {
	if err := s.records.Delete(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) registerGroup(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	if err := s.records.RegisterGroup(r.Context(), group); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"group": group})
}

func (s *Server) getGroup(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	ok, err := s.records.GroupExists(r.Context(), group)
	if err == nil && !ok {
		err = fmt.Errorf("group %q: %w", group, steaderr.ErrNotFound)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"group": group})
}

// queryNow returns the now query parameter, zero when absent.
func (s *Server) queryNow(r *http.Request) (time.Time, error) {
	text := r.URL.Query().Get("now")
	if text == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, text)
	if err != nil {
		return time.Time{}, &badRequest{fmt.Sprintf("now %q: want an RFC 3339 time", text)}
	}
	return s.clock(t)
}

func (s *Server) listClaimable(w http.ResponseWriter, r *http.Request) {
	limit := defaultRecords
	if text := r.URL.Query().Get("limit"); text != "" {
		n, err := strconv.Atoi(text)
		if err != nil || n < 0 || n > maxRecords {
			s.fail(w, r, invalidArgument("limit %q: want 0 to %d", text, maxRecords))
			return
		}
		limit = n
	}
	now, err := s.queryNow(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	recs, err := s.records.ListClaimable(r.Context(), r.PathValue("group"), now, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.Records{Records: wire.FromRecords(recs)})
}

// listLeased answers a page of the group's records whose lease is held,
// in id order, after the "after" id: limit 1 to record.MaxListLeased,
// default defaultRecords.
func (s *Server) listLeased(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := queryInt(q.Get("limit"), defaultRecords)
	var now time.Time
	if err == nil {
		now, err = s.queryNow(r)
	}
	var recs []record.Record
	if err == nil {
		recs, err = s.records.ListLeased(r.Context(), r.PathValue("group"), q.Get("after"), now, limit)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := wire.RecordPage{Records: wire.FromRecords(recs)}
	if len(recs) == limit {
		out.Next = recs[len(recs)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
}

// queryInt parses a query's number, def when absent; its range is the
// store's to check.
func queryInt(text string, def int) (int, error) {
	if text == "" {
		return def, nil
	}
	n, err := strconv.Atoi(text)
	if err != nil {
		return 0, invalidArgument("%q: want a number", text)
	}
	return n, nil
}

// readClaim reads a claim, claim-next or renew request and returns the
// record store on its clock, answering any error; ok is false when it did.
func (s *Server) readClaim(w http.ResponseWriter, r *http.Request) (req wire.ClaimRequest, st *record.Store, ok bool) {
	err := s.readJSON(w, r, &req)
	if err == nil {
		st, err = s.recordsAt(req.Now)
	}
	if err != nil {
		s.fail(w, r, err)
		return req, nil, false
	}
	return req, st, true
}

func (s *Server) claimRecord(w http.ResponseWriter, r *http.Request) {
	req, st, ok := s.readClaim(w, r)
	if !ok {
		return
	}
	rec, err := st.Claim(r.Context(), req.Group, r.PathValue("id"), req.Owner, time.Duration(req.TTL))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.metrics.recordClaims(1)
	writeRecord(w, http.StatusOK, rec)
}

func (s *Server) claimNext(w http.ResponseWriter, r *http.Request) {
	req, st, ok := s.readClaim(w, r)
	if !ok {
		return
	}
	if req.N > maxRecords {
		s.fail(w, r, invalidArgument("n %d: want at most %d", req.N, maxRecords))
		return
	}
	recs, err := st.ClaimNext(r.Context(), r.PathValue("group"), req.Owner, time.Duration(req.TTL), req.N)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.metrics.recordClaims(len(recs))
	writeJSON(w, http.StatusOK, wire.Records{Records: wire.FromRecords(recs)})
}

func (s *Server) renewRecord(w http.ResponseWriter, r *http.Request) {
	req, st, ok := s.readClaim(w, r)
	if !ok {
		return
	}
	rec := record.Record{ID: r.PathValue("id"), Group: req.Group, Lease: record.Lease{Owner: req.Owner, Incarnation: req.Incarnation}}
	lease, err := st.Renew(r.Context(), rec, time.Duration(req.TTL))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.Lease{Owner: lease.Owner, Incarnation: lease.Incarnation, Expiry: lease.Expiry})
}

// probe reports whether the group has a claimable record, and if not how
// long until the earliest held lease expires (the engine seam's Probe).
func (s *Server) probe(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	now, err := s.queryNow(r)
	if err == nil {
		err = validate.Name("group", group)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	p, err := s.eng.Records().Probe(r.Context(), record.ProbeParams{Group: group, Now: now.UTC().Truncate(time.Microsecond)})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.Probe{Claimable: p.Claimable, Until: wire.Duration(p.Until)})
}

// waitClaimable long-polls: it answers {"claimable": true} once the group
// has a claimable record, or {"claimable": false} when timeout (default
// 30s, at most a minute) passes first.
func (s *Server) waitClaimable(w http.ResponseWriter, r *http.Request) {
	timeout := 30 * time.Second
	if text := r.URL.Query().Get("timeout"); text != "" {
		d, err := time.ParseDuration(text)
		if err != nil || d < 0 || d > maxPoll {
			s.fail(w, r, invalidArgument("timeout %q: want a duration from 0s to %v", text, maxPoll))
			return
		}
		timeout = d
	}
	s.wait(w, timeout)
	ctx, cancel := s.waitContext(r, timeout)
	defer cancel()
	err := s.records.WaitClaimable(ctx, r.PathValue("group"))
	if err != nil && ctx.Err() != nil && r.Context().Err() == nil {
		writeJSON(w, http.StatusOK, map[string]bool{"claimable": false})
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"claimable": true})
}
