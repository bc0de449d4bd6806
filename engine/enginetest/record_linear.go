package enginetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/steaderr"
)

// linOp is one operation of the linearizability check, on one record.
type linOp struct {
	kind    string // "load", "save", "claim" or "delete"
	id      string
	owner   string // claim: the claimer; save: the lease carried ("" releases)
	version int64  // save: the version carried
	inc     int64  // save: the incarnation carried
	value   string // save: the payload
}

// linOut is an operation's outcome: what the store answered.
type linOut struct {
	ok      bool   // load: found; save, claim: succeeded
	refusal string // "conflict", "leased" or "not found" when refused
	version int64
	inc     int64
	owner   string
	value   string
}

// linState is the model's state of one record.
type linState struct {
	exists  bool
	version int64
	floor   int64 // the highest version the id had before it was last deleted
	inc     int64
	owner   string
	value   string
}

// linModel is the sequential specification of Load, Save, Claim and Delete
// on one record, with leases that never expire (the clock stands still).
var linModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byID := map[string][]porcupine.Operation{}
		var ids []string
		for _, op := range history {
			id := op.Input.(linOp).id
			if byID[id] == nil {
				ids = append(ids, id)
			}
			byID[id] = append(byID[id], op)
		}
		out := make([][]porcupine.Operation, len(ids))
		for i, id := range ids {
			out[i] = byID[id]
		}
		return out
	},
	Init: func() any { return linState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(linState), input.(linOp), output.(linOut)
		switch in.kind {
		case "load":
			if !s.exists {
				return !out.ok, s
			}
			return out.ok && out.version == s.version && out.inc == s.inc && out.owner == s.owner && out.value == s.value, s
		case "delete":
			return out.ok, linState{floor: max(s.floor, s.version)}
		case "claim":
			switch {
			case !s.exists:
				return out.refusal == "not found", s
			case s.owner != "" && s.owner != in.owner:
				return out.refusal == "leased", s
			}
			next := s
			next.version, next.inc, next.owner = s.version+1, s.inc+1, in.owner
			return out.ok && out.version == next.version && out.inc == next.inc, next
		case "save":
			var accept bool
			next := s
			if in.version == 0 {
				accept = !s.exists
				next = linState{exists: true, inc: in.inc, owner: in.owner, floor: s.floor}
			} else {
				accept = s.exists && s.version == in.version && (in.owner == "" || in.owner == s.owner && in.inc == s.inc)
				if in.owner == "" {
					next.owner = ""
				}
			}
			if !accept {
				return out.refusal == "conflict", s
			}
			next.version, next.value = s.version+1, in.value
			if in.version == 0 {
				// A create starts above every version the id had; by how
				// much depends on the other records of its group.
				if out.version <= s.floor {
					return false, s
				}
				next.version = out.version
			}
			return out.ok && out.version == next.version && out.inc == next.inc, next
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		return fmt.Sprintf("%+v -> %+v", input, output)
	},
}

// recordLinearizable runs concurrent Load, Save, Claim and Delete calls on
// a few records and checks the history against linModel with porcupine: a
// lost update or a stale overwrite makes it non-linearizable.
func recordLinearizable(t *testing.T, h Harness) {
	const workers, opsPerWorker = 6, 40
	ids := []string{"x", "y"}
	b := recSetup(t, h)
	g := b.group(t, "g")
	seed := metamorphicSeed()
	t.Logf("seed %d (-enginetest.seed replays it)", seed)

	start := time.Now()
	var mu sync.Mutex
	var history []porcupine.Operation
	var wg sync.WaitGroup
	for w := range workers {
		rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
		owner := fmt.Sprintf("w%d", w)
		wg.Go(func() {
			// seen is the worker's last view of each record: what it saves from.
			seen := map[string]record.Record{}
			for i := range opsPerWorker {
				id := ids[rng.IntN(len(ids))]
				in := linOp{id: id}
				call := time.Since(start).Nanoseconds()
				var out linOut
				var err error
				switch n := rng.IntN(100); {
				case n < 30:
					in.kind = "load"
					var rec record.Record
					rec, err = b.store.Load(t.Context(), id)
					if err == nil {
						seen[id] = rec
						out = linOut{ok: true, version: rec.Version, inc: rec.Lease.Incarnation, owner: rec.Lease.Owner, value: string(rec.Payload)}
					}
				case n < 70:
					in.kind = "save"
					rec, ok := seen[id]
					if !ok {
						rec = newRecord(id, g)
					}
					if rng.IntN(4) == 0 {
						rec.Lease.Owner = "" // release
					}
					rec.Payload = fmt.Appendf(nil, "%s-%d", owner, i)
					in.version, in.owner, in.inc, in.value = rec.Version, rec.Lease.Owner, rec.Lease.Incarnation, string(rec.Payload)
					rec, err = b.store.Save(t.Context(), rec)
					if err == nil {
						seen[id] = rec
						out = linOut{ok: true, version: rec.Version, inc: rec.Lease.Incarnation}
					}
				case n < 95:
					in.kind, in.owner = "claim", owner
					var rec record.Record
					rec, err = b.store.Claim(t.Context(), g, id, owner, time.Hour)
					if err == nil {
						seen[id] = rec
						out = linOut{ok: true, version: rec.Version, inc: rec.Lease.Incarnation}
					}
				default:
					in.kind = "delete"
					err = b.store.Delete(t.Context(), id)
					out.ok = err == nil
					delete(seen, id)
				}
				switch {
				case err == nil:
				case errors.Is(err, steaderr.ErrConflict):
					out.refusal = "conflict"
				case errors.Is(err, steaderr.ErrLeased):
					out.refusal = "leased"
				case errors.Is(err, steaderr.ErrNotFound):
					out.refusal = "not found"
				default:
					t.Errorf("%s %+v: %v", owner, in, err)
					return
				}
				ret := time.Since(start).Nanoseconds()
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: w, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	switch res := porcupine.CheckOperationsTimeout(linModel, history, 5*time.Minute); res {
	case porcupine.Illegal:
		t.Fatalf("the history of %d operations is not linearizable (seed %d)", len(history), seed)
	case porcupine.Unknown:
		t.Fatalf("the linearizability check of %d operations found no verdict in 5 minutes (seed %d)", len(history), seed)
	}
}
