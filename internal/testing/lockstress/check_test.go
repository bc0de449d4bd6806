package lockstress

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// op is one operation of the history: its call and, unless its worker was
// killed first, its return.
type op struct {
	call, ret event
	returned  bool
	// end is when the operation had surely taken effect, if at all: its
	// return, or the moment its worker was dead.
	end int64
}

// known reports whether the operation's outcome is known.
func (o *op) known() bool { return o.returned && o.ret.Err == "" }

// loadHistory reads the histories of workers 0..n-1; killed maps a killed
// worker to a time it was surely dead.
func loadHistory(t *testing.T, dir string, n int, killed map[int]int64) []*op {
	t.Helper()
	var ops []*op
	for id := range n {
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("w%d.jsonl", id)))
		if _, wasKilled := killed[id]; os.IsNotExist(err) && wasKilled {
			continue // killed before it began
		}
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]*op{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var ev event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Fatalf("worker %d history: %v: %q", id, err, sc.Text())
			}
			o := byID[ev.Op]
			if !ev.Ret {
				o = &op{call: ev}
				byID[ev.Op] = o
				ops = append(ops, o)
				continue
			}
			o.ret, o.returned, o.end = ev, true, ev.T
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		for _, o := range byID {
			if o.returned {
				continue
			}
			dead, ok := killed[id]
			if !ok {
				t.Fatalf("worker %d exited normally but operation %s (%s) never returned", id, o.call.Op, o.call.Kind)
			}
			o.end = dead
		}
	}
	return ops
}

// check checks the history against the lock and resource rules: with
// porcupine, that grants take each name's tokens in order and the resource
// accepts exactly the writes with a token larger than any it accepted
// before; then that no two holders were live at once, on the holders'
// clocks and on the database's.
func check(t *testing.T, ops []*op, final map[string]int64) {
	t.Helper()
	var stats struct{ grants, refused, unknown, accepted, rejected, zombieAccepted, zombieRejected, renewals int }
	var history []porcupine.Operation
	last := int64(0)
	for _, o := range ops {
		last = max(last, o.end)
		switch {
		case !o.known():
			stats.unknown++
		case o.call.Kind == "acquire" && o.ret.OK:
			stats.grants++
		case o.call.Kind == "acquire":
			stats.refused++
			continue // changes nothing
		case o.call.Kind == "write" && o.ret.OK && o.call.Zombie:
			stats.zombieAccepted++
		case o.call.Kind == "write" && o.call.Zombie:
			stats.zombieRejected++
		case o.call.Kind == "write" && o.ret.OK:
			stats.accepted++
		case o.call.Kind == "write":
			stats.rejected++
		case o.call.Kind == "renew" && o.ret.OK:
			stats.renewals++
		}
		if o.call.Kind != "acquire" && o.call.Kind != "write" {
			continue
		}
		history = append(history, porcupine.Operation{
			Input:  input{kind: o.call.Kind, name: o.call.Name, token: o.call.Token},
			Call:   o.call.T,
			Output: output{known: o.known(), ok: o.ret.OK, token: o.ret.Token},
			Return: o.end,
		})
	}
	for _, name := range names {
		history = append(history, porcupine.Operation{
			Input: input{kind: "read", name: name}, Call: last + 1, Output: output{known: true, token: final[name]}, Return: last + 2,
		})
	}
	t.Logf("%d grants, %d refused, %d writes accepted, %d rejected, zombie writes %d accepted, %d rejected, %d renewals, %d outcomes unknown",
		stats.grants, stats.refused, stats.accepted, stats.rejected, stats.zombieAccepted, stats.zombieRejected, stats.renewals, stats.unknown)
	if stats.grants < len(names) || stats.accepted < len(names) {
		t.Fatalf("too little happened to check anything")
	}

	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model.ToModel(), history, 5*time.Minute)
	t.Logf("porcupine: %v on %d operations in %v", res, len(history), time.Since(start).Round(time.Millisecond))
	if res != porcupine.Ok {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("lockstress-%d.html", time.Now().UnixNano()))
		if err := porcupine.VisualizePath(model.ToModel(), info, path); err == nil {
			t.Logf("visualization: %s", path)
		}
		t.Fatalf("history is not linearizable (%v)", res)
	}
	checkLeases(t, ops)
}

type input struct {
	kind  string // acquire, write, read
	name  string
	token int64 // write: the token written
}

type output struct {
	known bool
	ok    bool  // granted, accepted
	token int64 // acquire: the token granted; read: the resource's token
}

// state is one name's lock and resource: the last token granted and the
// largest token the resource accepted.
type state struct{ granted, accepted int64 }

// model is a lock whose grants take consecutive tokens, with a fenced
// resource that accepts a write only from a token granted already and
// larger than every token it accepted. An operation whose outcome is
// unknown may or may not have taken effect.
var model = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byName := map[string][]porcupine.Operation{}
		for _, o := range history {
			byName[o.Input.(input).name] = append(byName[o.Input.(input).name], o)
		}
		var parts [][]porcupine.Operation
		for _, p := range byName {
			parts = append(parts, p)
		}
		return parts
	},
	Init: func() []any { return []any{state{}} },
	Step: func(st, in, out any) []any {
		s, i, o := st.(state), in.(input), out.(output)
		switch i.kind {
		case "acquire":
			next := state{s.granted + 1, s.accepted}
			switch {
			case !o.known:
				return []any{s, next}
			case o.token == next.granted:
				return []any{next}
			}
		case "write":
			acceptable := i.token > s.accepted && i.token <= s.granted
			after := state{s.granted, i.token}
			switch {
			case !o.known && acceptable:
				return []any{s, after}
			case !o.known:
				return []any{s}
			case o.ok && acceptable:
				return []any{after}
			case !o.ok && i.token <= s.accepted:
				return []any{s}
			}
		case "read":
			if o.token == s.accepted {
				return []any{s}
			}
		}
		return nil
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(input), out.(output)
		if !o.known {
			return fmt.Sprintf("%s %s %d → ?", i.kind, i.name, i.token)
		}
		return fmt.Sprintf("%s %s %d → ok=%v token=%d", i.kind, i.name, i.token, o.ok, o.token)
	},
	DescribeState: func(st any) string {
		return fmt.Sprintf("granted %d, accepted %d", st.(state).granted, st.(state).accepted)
	},
}

// lease is what the history says about one grant.
type lease struct {
	token int64
	// start and end bound, on the host's clock, when the holder believed it
	// held the lock: from the grant's return to its last deadline, or its
	// release call.
	start, end int64
	// dbNow is when the database granted it; expiry the latest expiry a
	// renewal is known to have set (µs, database clock).
	dbNow, expiry int64
	// released: a release may have freed it (a release that returned true,
	// or whose outcome is unknown).
	released bool
}

// checkLeases checks that leases of one name never overlap on the holders'
// clocks, and that a lease not released was granted anew only once it had
// expired on the database's clock.
func checkLeases(t *testing.T, ops []*op) {
	t.Helper()
	leases := map[string]map[int64]*lease{}
	get := func(name string, token int64) *lease {
		if leases[name] == nil {
			leases[name] = map[int64]*lease{}
		}
		if leases[name][token] == nil {
			leases[name][token] = &lease{token: token}
		}
		return leases[name][token]
	}
	// Deadlines first, then release calls cut them short.
	for _, o := range ops {
		c, r := o.call, o.ret
		switch {
		case c.Kind == "acquire" && o.known() && r.OK:
			l := get(c.Name, r.Token)
			l.start, l.dbNow = r.T, r.DBNow
			l.end, l.expiry = max(l.end, r.Until), max(l.expiry, r.Expiry)
		case c.Kind == "renew" && o.known() && r.OK:
			l := get(c.Name, c.Token)
			l.end, l.expiry = max(l.end, r.Until), max(l.expiry, r.Expiry)
		}
	}
	for _, o := range ops {
		if c := o.call; c.Kind == "release" {
			l := get(c.Name, c.Token)
			l.end = min(l.end, c.T)
			l.released = l.released || !o.known() || o.ret.OK
		}
	}
	for name, byToken := range leases {
		var ls []*lease
		for _, l := range byToken {
			if l.start != 0 { // a grant whose return was recorded
				ls = append(ls, l)
			}
		}
		slices.SortFunc(ls, func(a, b *lease) int { return cmp.Compare(a.token, b.token) })
		var live *lease // the lease, of those so far, live the longest
		for _, l := range ls {
			if live != nil && l.start < live.end {
				t.Errorf("%s: token %d granted at %d while token %d was live until %d", name, l.token, l.start, live.token, live.end)
			}
			if p := byToken[l.token-1]; p != nil && p.start != 0 && !p.released && l.dbNow < p.expiry {
				t.Errorf("%s: token %d granted at DB time %d, before token %d (not released) expired at %d", name, l.token, l.dbNow, p.token, p.expiry)
			}
			if live == nil || l.end > live.end {
				live = l
			}
		}
	}
}
