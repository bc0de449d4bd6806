package recordstress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/internal/testing/pgtest"
	"github.com/steadkit/stead/record"
)

// The kill-and-resume test: real processes (this test binary, re-run as
// workers) share records on PostgreSQL.
const (
	e2eRecords = 30
	e2eSteps   = 4
	e2eTTL     = time.Second
	e2eBatch   = 3
	// e2eStepWork is each step's pretend work, done in the worker.
	e2eStepWork  = 10 * time.Millisecond
	e2eWorkerEnv = "STEAD_E2E_WORKER"
)

// e2eWorker configures one worker process.
type e2eWorker struct {
	StoreURL, AdminURL, Schema string
	Group, Owner               string
	Report                     string // file the worker writes its e2eReport to
}

// e2eReport is what a worker did.
type e2eReport struct {
	Claimed, Completed, Fenced int
}

func e2eID(i int) string { return fmt.Sprintf("job-%03d", i) }

// TestRecordWorkerProcess is not a test: it is the worker the kill-and-
// resume test starts, as a process of its own.
func TestRecordWorkerProcess(t *testing.T) {
	raw := os.Getenv(e2eWorkerEnv)
	if raw == "" {
		t.Skip("the kill-and-resume test's worker process")
	}
	var cfg e2eWorker
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	rep, err := runE2EWorker(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(rep)
	if err := os.WriteFile(cfg.Report, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// runE2EWorker claims records of its group and works them step by step,
// checkpointing after each step, until every record of the test is done.
// Before each step it records the step's side effect, tagged with the
// lease incarnation, in the effects table.
func runE2EWorker(ctx context.Context, cfg e2eWorker) (e2eReport, error) {
	var rep e2eReport
	st, err := stead.Open(ctx, cfg.StoreURL, stead.WithInstanceID(cfg.Owner))
	if err != nil {
		return rep, err
	}
	defer st.Close()
	pcfg, err := pgxpool.ParseConfig(cfg.AdminURL)
	if err != nil {
		return rep, err
	}
	pcfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	admin, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return rep, err
	}
	defer admin.Close()
	effect := "INSERT INTO " + pgx.Identifier{cfg.Schema, "e2e_effects"}.Sanitize() + " (id, incarnation, step) VALUES ($1, $2, $3)"
	for {
		recs, err := st.Records.ClaimNext(ctx, cfg.Group, cfg.Owner, e2eTTL, e2eBatch)
		if err != nil {
			return rep, err
		}
		rep.Claimed += len(recs)
		for _, rec := range recs {
			// A full lease for this record's work.
			if rec.Lease, err = st.Records.Renew(ctx, rec, e2eTTL); err != nil {
				rep.Fenced++
				continue
			}
			step, _ := strconv.Atoi(string(rec.Payload))
			for ; step <= e2eSteps && err == nil; step++ {
				time.Sleep(e2eStepWork)
				if _, err = admin.Exec(ctx, effect, rec.ID, rec.Lease.Incarnation, step); err != nil {
					return rep, err
				}
				rec.Payload = []byte(strconv.Itoa(step + 1))
				if step == e2eSteps {
					rec.Status = record.Completed
				}
				rec, err = st.Records.Save(ctx, rec)
			}
			switch {
			case errors.Is(err, stead.ErrConflict):
				rep.Fenced++
			case err != nil:
				return rep, err
			default:
				rep.Completed++
			}
		}
		if len(recs) > 0 {
			continue
		}
		if done, err := e2eAllDone(ctx, st); err != nil || done {
			return rep, err
		}
		wctx, cancel := context.WithTimeout(ctx, 2*e2eTTL)
		err = st.Records.WaitClaimable(wctx, cfg.Group)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return rep, err
		}
	}
}

func e2eAllDone(ctx context.Context, st *stead.Store) (bool, error) {
	for i := range e2eRecords {
		rec, err := st.Records.Load(ctx, e2eID(i))
		if err != nil || rec.Status != record.Completed {
			return false, err
		}
	}
	return true, nil
}

// startWorker starts a worker process; wait returns its report.
func startWorker(t *testing.T, cfg e2eWorker) (cmd *exec.Cmd, wait func() (e2eReport, error)) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Report = t.TempDir() + "/report.json"
	raw, _ := json.Marshal(cfg)
	cmd = exec.Command(exe, "-test.run=^TestRecordWorkerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), e2eWorkerEnv+"="+string(raw))
	out := &testkit.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, func() (e2eReport, error) {
		var rep e2eReport
		if err := cmd.Wait(); err != nil {
			return rep, fmt.Errorf("worker %s: %w\n%s", cfg.Owner, err, out.String())
		}
		raw, err := os.ReadFile(cfg.Report)
		if err == nil {
			err = json.Unmarshal(raw, &rep)
		}
		return rep, err
	}
}

// TestRecordKillAndResume runs a worker process, kills it with SIGKILL
// mid-run, and checks that a second process in the same group recovers
// and finishes every unfinished record once the killed one's leases
// expire, that a process in another group recovers nothing, that every
// record is completed exactly once, and that every record's saves form one
// version chain in which the killed process's come before the recovering
// one's. A zombie still running after its lease was taken is
// TestRecordZombieFencing's case (engine/postgres).
func TestRecordKillAndResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	st, err := stead.Open(ctx, db.StoreURL())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	q := func(name string) string { return pgx.Identifier{db.Schema, name}.Sanitize() }
	// Every insert and update of a record is written to an audit table,
	// by a trigger, in the writing transaction: the history of what
	// landed.
	for _, stmt := range []string{
		"CREATE TABLE " + q("e2e_effects") + " (id text, incarnation bigint, step int, PRIMARY KEY (id, incarnation, step))",
		"CREATE TABLE " + q("e2e_audit") + " (seq bigserial PRIMARY KEY, id text, version bigint, owner text, incarnation bigint, status text, payload text)",
		"CREATE FUNCTION " + q("e2e_audit") + "() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN INSERT INTO " + q("e2e_audit") +
			" (id, version, owner, incarnation, status, payload) VALUES (NEW.id, NEW.version, NEW.lease_owner, NEW.lease_incarnation, NEW.status, convert_from(NEW.payload, 'UTF8')); RETURN NEW; END $$",
		"CREATE TRIGGER e2e_audit AFTER INSERT OR UPDATE ON " + q("records") + " FOR EACH ROW EXECUTE FUNCTION " + q("e2e_audit") + "()",
	} {
		if _, err := db.Admin.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range []string{"main", "other"} {
		if err := st.Records.RegisterGroup(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	for i := range e2eRecords {
		if _, err := st.Records.Save(ctx, record.Record{ID: e2eID(i), Group: "main", Status: record.Active, Payload: []byte("1")}); err != nil {
			t.Fatal(err)
		}
	}
	worker := func(group, owner string) e2eWorker {
		// Commits need not survive a crash of the server here, only of the
		// worker: synchronous_commit=off keeps the test fast.
		return e2eWorker{StoreURL: db.StoreURL() + "&synchronous_commit=off", AdminURL: db.URL, Schema: db.Schema, Group: group, Owner: owner}
	}

	start := time.Now()
	// A works until a third of the records are done, then dies in the
	// middle of a batch: while it holds a lease on a record not done.
	a, waitA := startWorker(t, worker("main", "node-a"))
	for deadline := time.Now().Add(30 * time.Second); ; {
		var done, held int
		err := db.Admin.QueryRow(ctx, "SELECT count(*) FILTER (WHERE status = 'completed'), "+
			"count(*) FILTER (WHERE status <> 'completed' AND lease_owner = 'node-a') FROM "+q("records")).Scan(&done, &held)
		if err != nil {
			t.Fatal(err)
		}
		if done >= e2eRecords/3 && held > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker A completed %d records within 30s", done)
		}
		time.Sleep(time.Millisecond) // polling the database for progress
	}
	if err := a.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := waitA(); err == nil {
		t.Fatal("worker A exited cleanly; want it killed")
	}
	var unfinished, aHeld []string
	rows, _ := db.Admin.Query(ctx, "SELECT id, lease_owner FROM "+q("records")+" WHERE status <> 'completed' ORDER BY id")
	for rows.Next() {
		var id, owner string
		if err := rows.Scan(&id, &owner); err != nil {
			t.Fatal(err)
		}
		unfinished = append(unfinished, id)
		if owner == "node-a" {
			aHeld = append(aHeld, id)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(aHeld) == 0 {
		t.Fatal("A was killed holding no lease: the test proves nothing")
	}
	t.Logf("%v: A killed with %d records done, %d unfinished, %d of them leased to A", time.Since(start), e2eRecords-len(unfinished), len(unfinished), len(aHeld))

	// B (same group) and C (another group) start at once; B must wait for
	// A's leases to expire.
	_, waitB := startWorker(t, worker("main", "node-b"))
	_, waitC := startWorker(t, worker("other", "node-c"))
	repB, err := waitB()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v: B done", time.Since(start))
	repC, err := waitC()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v: B: %+v; C: %+v", time.Since(start), repB, repC)
	if repC.Claimed != 0 {
		t.Fatalf("C, in another group, claimed %d records", repC.Claimed)
	}
	if repB.Completed != len(unfinished) || repB.Fenced != 0 {
		t.Fatalf("B completed %d records (fenced %d), want the %d unfinished ones", repB.Completed, repB.Fenced, len(unfinished))
	}

	// The audit: per record, versions count up by one, incarnations never
	// go down, exactly one completion landed, and nothing of A's landed
	// once B had the record; C never wrote.
	type landed struct {
		version, incarnation int64
		owner, status, next  string
	}
	history := map[string][]landed{}
	rows, _ = db.Admin.Query(ctx, "SELECT id, version, owner, incarnation, status, payload FROM "+q("e2e_audit")+" ORDER BY seq")
	for rows.Next() {
		var id string
		var l landed
		if err := rows.Scan(&id, &l.version, &l.owner, &l.incarnation, &l.status, &l.next); err != nil {
			t.Fatal(err)
		}
		history[id] = append(history[id], l)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for i := range e2eRecords {
		id := e2eID(i)
		h := history[id]
		completions, bSeen := 0, false
		for j, l := range h {
			renewal := j > 0 && l.version == h[j-1].version
			if renewal && (l.owner != h[j-1].owner || l.incarnation != h[j-1].incarnation || l.status != h[j-1].status || l.next != h[j-1].next) {
				t.Fatalf("%s: two different writes landed as version %d: %+v", id, l.version, h)
			}
			if !renewal && (j == 0 && l.version != 1 || j > 0 && l.version != h[j-1].version+1) {
				t.Fatalf("%s: write %d landed as version %d: %+v", id, j+1, l.version, h)
			}
			if j > 0 && l.incarnation < h[j-1].incarnation {
				t.Fatalf("%s: incarnation went down: %+v", id, h)
			}
			switch l.owner {
			case "node-b":
				bSeen = true
			case "node-a":
				if bSeen {
					t.Fatalf("%s: A's write landed after B claimed the record: %+v", id, h)
				}
			case "node-c":
				t.Fatalf("%s: C wrote it: %+v", id, h)
			}
			if l.status == "completed" {
				completions++
			}
		}
		if completions != 1 || h[len(h)-1].status != "completed" {
			t.Fatalf("%s: %d completions landed, last status %q; want exactly one, last", id, completions, h[len(h)-1].status)
		}
		// The completing incarnation did each step from the checkpoint it
		// claimed to the end, once.
		last := h[len(h)-1]
		from := 0
		for _, l := range h {
			if l.incarnation == last.incarnation {
				from, _ = strconv.Atoi(l.next)
				break
			}
		}
		var steps int
		if err := db.Admin.QueryRow(ctx, "SELECT count(*) FROM "+q("e2e_effects")+" WHERE id = $1 AND incarnation = $2",
			id, last.incarnation).Scan(&steps); err != nil {
			t.Fatal(err)
		}
		if want := e2eSteps - from + 1; steps != want {
			t.Fatalf("%s: the completing incarnation %d did %d steps, want %d (from step %d): %+v", id, last.incarnation, steps, want, from, h)
		}
	}
}
