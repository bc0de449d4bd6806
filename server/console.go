package server

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
	"github.com/steadkit/stead/lock"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/server/access"
	"github.com/steadkit/stead/steaderr"
)

// The console (docs/guides/operations.md): server-rendered pages under
// /ui/, behind the same login as /v1 (a read of v1), each page bounded.

//go:embed console
var consoleFiles embed.FS

// consolePrefix is where the console is served.
const consolePrefix = "/ui/"

// Bounds of the console's pages.
const (
	// consolePage is the refs or tags one page lists.
	consolePage = 100
	// consoleGraphEdges bounds the nodes of each kind an explain graph
	// draws; the rest are counted.
	consoleGraphEdges = 24
	// sweepRing is how many recent sweeps the console's chart shows.
	sweepRing = 60
)

// Preview is a deletion a front end's policies would make now, as its
// dry run lists it (the registry's retention).
type Preview struct {
	Repository, Tag, Digest, Reason string
	Pushed                          time.Time
}

// sweepPoint is one sweep the chart shows.
type sweepPoint struct {
	End                         time.Time
	Result                      string
	Deleted, BytesFreed, Staged int64
	Duration                    time.Duration
	// Stored is what the store held after the sweep, when Measured (a
	// sweep that ran and read it).
	Stored   gc.Stored
	Measured bool
}

// sweepHistory is a bounded ring of the server's recent sweeps.
type sweepHistory struct {
	mu     sync.Mutex
	points []sweepPoint // oldest first, at most sweepRing
}

func (h *sweepHistory) add(p sweepPoint) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.points) == sweepRing {
		h.points = append(h.points[:0], h.points[1:]...)
	}
	h.points = append(h.points, p)
}

func (h *sweepHistory) list() []sweepPoint {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]sweepPoint(nil), h.points...)
}

var consoleTemplates = func() map[string]*template.Template {
	funcs := template.FuncMap{
		"bytes": humanBytes,
		"time": func(t time.Time) string {
			if t.IsZero() {
				return "—"
			}
			return t.UTC().Format(time.RFC3339)
		},
		"int64": func(n int) int64 { return int64(n) },
	}
	out := map[string]*template.Template{}
	pages, _ := fs.Glob(consoleFiles, "console/*.html")
	for _, p := range pages {
		if p == "console/layout.html" {
			continue
		}
		name := strings.TrimSuffix(strings.TrimPrefix(p, "console/"), ".html")
		out[name] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(consoleFiles, "console/layout.html", p))
	}
	return out
}()

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// consoleRoutes registers the console's pages on mux and returns their
// patterns.
func (s *Server) consoleRoutes(mux *http.ServeMux) []string {
	var patterns []string
	handle := func(pattern string, h http.HandlerFunc) {
		mux.Handle(pattern, h)
		patterns = append(patterns, pattern)
	}
	static, _ := fs.Sub(consoleFiles, "console/static")
	handle("GET /ui/static/", s.consoleAuth(http.StripPrefix("/ui/static/", http.FileServerFS(static)).ServeHTTP))
	handle("GET /ui/{$}", s.consoleAuth(s.uiHome))
	handle("GET /ui/refs", s.consoleAuth(s.uiRefs))
	handle("GET /ui/repository", s.consoleAuth(s.uiRepository))
	handle("GET /ui/keys/{key}", s.consoleAuth(s.uiKey))
	handle("GET /ui/gc", s.consoleAuth(s.uiGC))
	handle("GET /ui/retention", s.consoleAuth(s.uiRetention))
	handle("GET /ui/records", s.consoleAuth(s.uiRecords))
	handle("GET /ui/locks", s.consoleAuth(s.uiLocks))
	handle("GET /ui/", s.consoleAuth(func(w http.ResponseWriter, r *http.Request) {
		s.uiError(w, http.StatusNotFound, "no such page")
	}))
	return patterns
}

// consoleAuth checks the console's caller as /v1's GETs are checked; an
// anonymous caller is asked for Basic credentials, which browsers prompt
// for.
func (s *Server) consoleAuth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		if !s.access.Open() {
			c, err := s.check(r, "v1", access.Read)
			noteCaller(w, c)
			switch {
			case errors.Is(err, access.ErrTooManyAttempts):
				w.Header().Set("Retry-After", access.RetryAfter(err))
				s.uiError(w, http.StatusTooManyRequests, "too many failed logins: wait a moment")
				return
			case errors.Is(err, access.ErrDenied):
				s.uiError(w, http.StatusForbidden, "access denied: "+c.Name()+" may not read v1")
				return
			case err != nil:
				w.Header().Set("WWW-Authenticate", `Basic realm="stead console"`)
				s.uiError(w, http.StatusUnauthorized, "log in with a user and password of this server")
				return
			}
		}
		h(w, r)
	}
}

// render writes page with data, or a 500 page.
func (s *Server) render(w http.ResponseWriter, status int, page string, data any) {
	var buf bytes.Buffer
	if err := consoleTemplates[page].Execute(&buf, data); err != nil {
		s.log.Error("console: rendering "+page, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

type uiErrorPage struct {
	Title, Message string
	Status         int
}

func (s *Server) uiError(w http.ResponseWriter, status int, msg string) {
	s.render(w, status, "error", uiErrorPage{Title: http.StatusText(status), Message: msg, Status: status})
}

// uiFail answers err as a page: bad input 400, absent 404, else 500
// with the detail only in the log.
func (s *Server) uiFail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, steaderr.ErrInvalidKey), errors.Is(err, steaderr.ErrInvalidName), errors.Is(err, steaderr.ErrInvalidArgument):
		s.uiError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, steaderr.ErrNotFound):
		s.uiError(w, http.StatusNotFound, err.Error())
	default:
		if r.Context().Err() == nil {
			s.log.Error("console: "+r.URL.Path, "err", err)
		}
		s.uiError(w, http.StatusInternalServerError, "internal error (logged)")
	}
}

type uiRepo struct {
	Name string
}

type uiHome struct {
	Title string
	// Browsable reports that a front end lists repositories.
	Browsable    bool
	Repositories []uiRepo
	Next         string
	Sweeps       int
}

// browser is the mount that lists repositories for the console, or nil.
func (s *Server) browser() *Mount {
	for i, m := range s.opts.Mounts {
		if m.Repositories != nil && m.Repository != nil {
			return &s.opts.Mounts[i]
		}
	}
	return nil
}

// uiHome lists the front end's repositories, consolePage at a time, as
// the front end answers them (Mount.Repositories).
func (s *Server) uiHome(w http.ResponseWriter, r *http.Request) {
	page := uiHome{Title: "Repositories", Sweeps: len(s.sweeps.list())}
	after := r.URL.Query().Get("after")
	if !goodCursor(after) {
		s.uiError(w, http.StatusBadRequest, "not a page cursor")
		return
	}
	if m := s.browser(); m != nil {
		page.Browsable = true
		repos, err := m.Repositories(r.Context(), after, consolePage)
		if err != nil {
			s.uiFail(w, r, err)
			return
		}
		for _, repo := range repos {
			page.Repositories = append(page.Repositories, uiRepo{Name: repo})
		}
		if len(repos) == consolePage {
			page.Next = repos[len(repos)-1]
		}
	}
	s.render(w, http.StatusOK, "home", page)
}

type uiRef struct {
	Name, Key string
	Weak      bool
	Expiry    time.Time
	Size      int64
}

type uiRefsPage struct {
	Title, Prefix, Next string
	Refs                []uiRef
}

type uiUsage struct {
	Refs, Blobs, Bytes, DedupSavedBytes int64
	Truncated                           bool
	LastPush, LastPull                  time.Time
}

// listUI reads one page of refs under prefix after after.
func (s *Server) listUI(ctx context.Context, prefix, after string, sizes bool) ([]uiRef, string, error) {
	refs, err := s.refs.List(ctx, prefix, after, consolePage+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(refs) > consolePage {
		refs = refs[:consolePage]
		next = refs[consolePage-1].Name
	}
	return s.showRefs(ctx, refs, sizes), next, nil
}

// showRefs shows refs, with their blobs' sizes when sizes is set (-1 for a
// blob gone).
func (s *Server) showRefs(ctx context.Context, refs []ref.Ref, sizes bool) []uiRef {
	out := make([]uiRef, 0, len(refs))
	for _, rf := range refs {
		u := uiRef{Name: rf.Name, Key: rf.Key.String(), Weak: rf.Weak, Expiry: rf.Expiry, Size: -1}
		if sizes {
			if info, err := s.blobs.Stat(ctx, rf.Key); err == nil {
				u.Size = info.Size
			}
		}
		out = append(out, u)
	}
	return out
}

// goodCursor reports whether s may be a page's prefix or cursor: valid
// UTF-8, no longer than a ref name.
func goodCursor(s string) bool { return len(s) <= ref.MaxNameLen && utf8.ValidString(s) }

// uiRefs lists the refs under a prefix, consolePage at a time.
func (s *Server) uiRefs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	prefix := q.Get("prefix")
	if !goodCursor(prefix) || !goodCursor(q.Get("after")) {
		s.uiError(w, http.StatusBadRequest, "prefix too long or not UTF-8")
		return
	}
	refs, next, err := s.listUI(r.Context(), prefix, q.Get("after"), true)
	if err != nil {
		s.uiFail(w, r, err)
		return
	}
	s.render(w, http.StatusOK, "refs", uiRefsPage{Title: "Refs", Prefix: prefix, Next: next, Refs: refs})
}

type uiRepoPage struct {
	Title, Name, RefPrefix string
	Tags, Manifests        []uiRef
	NextTag, NextMan       string
	Usage                  uiUsage
}

// uiRepository shows a repository as the front end answers it
// (Mount.Repository): its usage, a page of tags and one of manifests,
// with sizes.
func (s *Server) uiRepository(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name := q.Get("name")
	if !goodCursor(name) || !goodCursor(q.Get("tags_after")) || !goodCursor(q.Get("manifests_after")) {
		s.uiError(w, http.StatusBadRequest, "not a page cursor")
		return
	}
	m := s.browser()
	if m == nil {
		s.uiError(w, http.StatusNotFound, "no front end of this server lists repositories")
		return
	}
	repo, err := m.Repository(r.Context(), RepositoryQuery{Name: name, TagsAfter: q.Get("tags_after"), ManifestsAfter: q.Get("manifests_after"), Limit: consolePage})
	if err != nil {
		s.uiFail(w, r, err)
		return
	}
	p := uiRepoPage{Title: name, Name: name, RefPrefix: repo.RefPrefix,
		Tags: s.showRefs(r.Context(), repo.Tags, true), Manifests: s.showRefs(r.Context(), repo.Manifests, true)}
	if repo.MoreTags {
		p.NextTag = p.Tags[len(p.Tags)-1].Name
	}
	if repo.MoreManifests {
		p.NextMan = p.Manifests[len(p.Manifests)-1].Name
	}
	u := repo.Usage
	p.Usage = uiUsage{Refs: u.Refs, Blobs: u.Blobs, Bytes: u.Bytes, DedupSavedBytes: u.DedupSavedBytes, Truncated: u.Truncated, LastPush: u.LastPush, LastPull: u.LastPull}
	s.render(w, http.StatusOK, "repository", p)
}

// graphNode is one box of an explain graph.
type graphNode struct {
	X, Y, W      int
	Kind         string // key, pin, ref, parent, source, window, more
	Label        string
	Detail       string
	Href         string
	LineX, LineY int // where its edge leaves the node
	TX, TY       int // and meets the key
}

type uiKeyPage struct {
	Title, Key, Verdict string
	// State is the verdict's first clause ("kept", "collectable"…).
	State             string
	Stored, Staged    bool
	Size              int64
	VisibleAfter, Now time.Time
	Nodes             []graphNode
	Width, Height     int
	KeyX, KeyY        int
}

// uiKey draws a key's explain graph: the key in the middle, what keeps
// it around it (pins, refs, parents — each parent a link to its own
// page), the sources referencing it and its window deadline.
func (s *Server) uiKey(w http.ResponseWriter, r *http.Request) {
	key, err := blob.ParseKey(r.PathValue("key"))
	if err != nil {
		s.uiFail(w, r, err)
		return
	}
	x, err := s.gc.Explain(r.Context(), key)
	if err != nil {
		s.uiFail(w, r, err)
		return
	}
	s.render(w, http.StatusOK, "key", explainGraph(x))
}

// explainGraph lays x out in columns: pins and sources left, the key in
// the middle, refs and parents right, the window deadline below.
func explainGraph(x gc.Explanation) uiKeyPage {
	const rowH, boxW, keyW, gap = 34, 300, 260, 60
	p := uiKeyPage{Title: "Key " + x.Key.String()[:19] + "…", Key: x.Key.String(), Verdict: x.Verdict(), Stored: x.Stored, Staged: x.Staged,
		Size: x.Size, VisibleAfter: x.VisibleAfter, Now: x.Now}
	p.State, _, _ = strings.Cut(p.Verdict, ":")
	var left, right []graphNode
	for i, pin := range x.Pins {
		if i == consoleGraphEdges {
			left = append(left, graphNode{Kind: "more", Label: fmt.Sprintf("and %d more pins", len(x.Pins)-i)})
			break
		}
		state := "expired"
		if pin.Expiry.After(x.Now) {
			state = "live until " + pin.Expiry.UTC().Format(time.RFC3339)
		}
		left = append(left, graphNode{Kind: "pin", Label: "pin " + pin.Owner, Detail: state})
	}
	for i, src := range x.Sources {
		if i == consoleGraphEdges {
			left = append(left, graphNode{Kind: "more", Label: fmt.Sprintf("and %d more sources", len(x.Sources)-i)})
			break
		}
		left = append(left, graphNode{Kind: "source", Label: "source " + src, Detail: "references it"})
	}
	for i, rf := range x.Refs {
		if i == consoleGraphEdges {
			right = append(right, graphNode{Kind: "more", Label: fmt.Sprintf("and %d more refs", len(x.Refs)-i)})
			break
		}
		detail := "keeps it"
		switch {
		case !rf.Live(x.Now):
			detail = "expired"
		case rf.Weak:
			detail = "weak: names it, keeps nothing"
		}
		right = append(right, graphNode{Kind: "ref", Label: rf.Name, Detail: detail, Href: "/ui/refs?prefix=" + template.URLQueryEscaper(rf.Name)})
	}
	for i, parent := range x.Parents {
		if i == consoleGraphEdges {
			right = append(right, graphNode{Kind: "more", Label: fmt.Sprintf("and %d more parents", len(x.Parents)-i)})
			break
		}
		right = append(right, graphNode{Kind: "parent", Label: parent.String()[:23] + "…", Detail: "parent blob, references it", Href: "/ui/keys/" + parent.String()})
	}
	rows := max(len(left), len(right), 1)
	p.Height = rows*rowH + 20
	if x.Staged {
		p.Height += 2 * rowH
	}
	p.Width = 2*boxW + keyW + 4*gap
	p.KeyX, p.KeyY = boxW+2*gap, (rows*rowH)/2
	place := func(nodes []graphNode, x0, lineX, tx int) {
		off := (rows - len(nodes)) * rowH / 2
		for i := range nodes {
			n := &nodes[i]
			n.X, n.Y, n.W = x0, off+i*rowH+10, boxW
			n.LineX, n.LineY, n.TX, n.TY = lineX, n.Y+14, tx, p.KeyY
			p.Nodes = append(p.Nodes, *n)
		}
	}
	place(left, gap/2, gap/2+boxW, p.KeyX)
	place(right, p.KeyX+keyW+gap+gap/2, p.KeyX+keyW+gap+gap/2, p.KeyX+keyW)
	if x.Staged {
		p.Nodes = append(p.Nodes, graphNode{Kind: "window", X: p.KeyX - 20, Y: rows*rowH + 30, W: keyW + 40,
			Label: "window deadline", Detail: x.VisibleAfter.UTC().Format(time.RFC3339), LineX: p.KeyX + keyW/2, LineY: rows*rowH + 30, TX: p.KeyX + keyW/2, TY: p.KeyY + 22})
	}
	return p
}

type uiBar struct {
	X, Y, W, H int
	Title      string
}

// uiDot is one point of a line chart.
type uiDot struct {
	X, Y  int
	Title string
}

type uiGCPage struct {
	Title          string
	Sweeps         []sweepPoint
	Freed, Deleted []uiBar
	Width, Height  int
	MaxFreed       int64
	MaxDeleted     int64
	MaxStored      int64
	// Last is what the store held after the last sweep that read it.
	Last                    *gc.Stored
	StoredLine, PendingLine string
	StoredDots, PendingDots []uiDot
}

// uiGC charts the server's recent sweeps (a ring of the last sweepRing):
// stored bytes and garbage pending (the bytes staged for deletion) after
// each sweep that read them, on one scale, and bytes freed and deletions
// per sweep.
func (s *Server) uiGC(w http.ResponseWriter, r *http.Request) {
	pts := s.sweeps.list()
	p := uiGCPage{Title: "Collection", Sweeps: pts, Width: 720, Height: 120}
	for _, pt := range pts {
		p.MaxFreed, p.MaxDeleted = max(p.MaxFreed, pt.BytesFreed), max(p.MaxDeleted, pt.Deleted)
		if pt.Measured {
			p.MaxStored = max(p.MaxStored, pt.Stored.Bytes)
			p.Last = &pt.Stored
		}
	}
	bw := p.Width / sweepRing
	scale := func(v, top int64) int {
		if top <= 0 {
			return 0
		}
		return int(math.Round(float64(v) / float64(top) * float64(p.Height-10)))
	}
	bars := func(val func(sweepPoint) int64, top int64) []uiBar {
		var out []uiBar
		for i, pt := range pts {
			h := scale(val(pt), top)
			out = append(out, uiBar{X: i * bw, Y: p.Height - h, W: bw - 2, H: h,
				Title: fmt.Sprintf("%s: %d", pt.End.UTC().Format(time.RFC3339), val(pt))})
		}
		return out
	}
	p.Freed = bars(func(pt sweepPoint) int64 { return pt.BytesFreed }, p.MaxFreed)
	p.Deleted = bars(func(pt sweepPoint) int64 { return pt.Deleted }, p.MaxDeleted)
	line := func(val func(gc.Stored) int64, what string) (string, []uiDot) {
		var pts2 []string
		var dots []uiDot
		for i, pt := range pts {
			if !pt.Measured {
				continue
			}
			d := uiDot{X: i*bw + bw/2, Y: p.Height - scale(val(pt.Stored), p.MaxStored),
				Title: fmt.Sprintf("%s: %s %s", pt.End.UTC().Format(time.RFC3339), humanBytes(val(pt.Stored)), what)}
			pts2 = append(pts2, fmt.Sprintf("%d,%d", d.X, d.Y))
			dots = append(dots, d)
		}
		return strings.Join(pts2, " "), dots
	}
	p.StoredLine, p.StoredDots = line(func(st gc.Stored) int64 { return st.Bytes }, "stored")
	p.PendingLine, p.PendingDots = line(func(st gc.Stored) int64 { return st.PendingBytes }, "pending")
	s.render(w, http.StatusOK, "gc", p)
}

type uiRetentionPage struct {
	Title     string
	Policies  bool
	Deletions []Preview
	More      int
}

// uiRetention lists what the front ends' policies would delete now (a
// dry run), the first consolePage shown.
func (s *Server) uiRetention(w http.ResponseWriter, r *http.Request) {
	p := uiRetentionPage{Title: "Retention dry run"}
	for _, m := range s.opts.Mounts {
		if m.Preview == nil {
			continue
		}
		p.Policies = true
		ds, err := m.Preview(r.Context())
		if err != nil {
			s.uiFail(w, r, err)
			return
		}
		p.Deletions = append(p.Deletions, ds...)
	}
	if len(p.Deletions) > consolePage {
		p.More = len(p.Deletions) - consolePage
		p.Deletions = p.Deletions[:consolePage]
	}
	s.render(w, http.StatusOK, "retention", p)
}

type uiRecord struct {
	ID, Tenant, Status, Owner string
	Expired                   bool
	Expiry, UpdatedAt         time.Time
	Size                      int
}

type uiRecordsPage struct {
	Title, Group      string
	Asked, Exists     bool
	Records           []uiRecord
	Claimable, Lapsed int
	Full              bool
	// Leased is a page of the records leased now; LeasedAfter the cursor
	// it starts after, LeasedNext the next page's.
	Leased                  []uiRecord
	LeasedAfter, LeasedNext string
}

func uiRecordOf(rec record.Record) uiRecord {
	return uiRecord{ID: rec.ID, Tenant: rec.Tenant, Status: string(rec.Status), Owner: rec.Lease.Owner,
		Expired: rec.Lease.Owner != "", Expiry: rec.Lease.Expiry, UpdatedAt: rec.UpdatedAt, Size: len(rec.Payload)}
}

// uiRecords shows a group's records that are not parked: the claimable
// ones, the first consolePage in id order, telling those never leased (or
// released) from those whose lease expired; and those leased now, with
// owner and expiry, consolePage a page from the leased_after cursor.
func (s *Server) uiRecords(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	group := q.Get("group")
	p := uiRecordsPage{Title: "Records", Group: group, Asked: group != "", LeasedAfter: q.Get("leased_after")}
	if p.Asked {
		ok, err := s.records.GroupExists(r.Context(), group)
		if err != nil {
			s.uiFail(w, r, err)
			return
		}
		p.Exists = ok
	}
	if p.Exists {
		recs, err := s.records.ListClaimable(r.Context(), group, time.Time{}, consolePage)
		if err != nil {
			s.uiFail(w, r, err)
			return
		}
		p.Full = len(recs) == consolePage
		for _, rec := range recs {
			u := uiRecordOf(rec)
			if u.Expired {
				p.Lapsed++
			} else {
				p.Claimable++
			}
			p.Records = append(p.Records, u)
		}
		leased, err := s.records.ListLeased(r.Context(), group, p.LeasedAfter, time.Time{}, consolePage+1)
		if err != nil {
			s.uiFail(w, r, err)
			return
		}
		if len(leased) > consolePage {
			leased = leased[:consolePage]
			p.LeasedNext = leased[consolePage-1].ID
		}
		for _, rec := range leased {
			p.Leased = append(p.Leased, uiRecordOf(rec))
		}
	}
	s.render(w, http.StatusOK, "records", p)
}

type uiLocksPage struct {
	Title, Prefix, After, Next string
	Locks                      []lock.Grant
}

// uiLocks lists the locks held now under a prefix, consolePage a page in
// name order, with owner, token and expiry.
func (s *Server) uiLocks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := uiLocksPage{Title: "Locks", Prefix: q.Get("prefix"), After: q.Get("after")}
	grants, err := s.st.Locks.ListHeld(r.Context(), p.Prefix, p.After, consolePage+1)
	if err != nil {
		s.uiFail(w, r, err)
		return
	}
	if len(grants) > consolePage {
		grants = grants[:consolePage]
		p.Next = grants[consolePage-1].Name
	}
	p.Locks = grants
	s.render(w, http.StatusOK, "locks", p)
}
