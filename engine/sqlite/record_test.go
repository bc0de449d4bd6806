package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/steaderr"
)

// TestRecordClaimingUsesGroupIndex checks with EXPLAIN QUERY PLAN that the
// claimable listing, ClaimNext and Probe search the claiming indexes by
// group: neither other groups' records nor live leases are read.
func TestRecordClaimingUsesGroupIndex(t *testing.T) {
	t.Parallel()
	e, _ := setup(t)
	r := &e.records
	claimNextArgs := []any{sql.Named("owner", "o"), sql.Named("expiry", 10), sql.Named("now", 0), sql.Named("grp", "g"), sql.Named("n", 10)}
	for _, c := range []struct {
		query string
		args  []any
	}{{r.list.query, []any{"g", 0, 10}}, {r.claimNext.query, claimNextArgs}, {r.probe.query, []any{"g"}}} {
		q := c.query
		rows, err := e.writer.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+q, c.args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		joined := strings.Join(plan, "\n")
		for _, want := range []string{"records_unleased (grp=?)", "records_leased (grp=?"} {
			if !strings.Contains(joined, want) {
				t.Errorf("plan of %q does not search %s:\n%s", q, want, joined)
			}
		}
		for _, line := range plan {
			if strings.HasPrefix(line, "SCAN records") || line == "SCAN r" || strings.HasPrefix(line, "SCAN r ") {
				t.Errorf("plan of %q scans records:\n%s", q, joined)
			}
		}
	}
}

// TestRecordDefaultTenantIsUnique checks the database guarantee: a second
// default tenant for a group is refused by the partial unique index.
func TestRecordDefaultTenantIsUnique(t *testing.T) {
	t.Parallel()
	e, _ := setup(t)
	ctx := t.Context()
	s := record.NewStore(e.Records(), record.Options{})
	if err := s.RegisterGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(ctx, record.Record{ID: "r", Group: "g", Status: record.Active}); err != nil {
		t.Fatal(err)
	}
	_, err := e.writer.ExecContext(ctx, "INSERT INTO record_tenants (grp, name) VALUES ('g', NULL)")
	var sqliteErr *sqlite.Error
	if !errors.As(err, &sqliteErr) || sqliteErr.Code() != sqlite3.SQLITE_CONSTRAINT_UNIQUE {
		t.Fatalf("a second default tenant: %v, want a unique constraint violation", err)
	}
}

// TestRecordFailedClaimCommitsNothing stores a row the engine cannot read
// (a float incarnation, as a claim past the top of the range once left):
// a ClaimNext that fails on it must not commit its claim of the others.
func TestRecordFailedClaimCommitsNothing(t *testing.T) {
	t.Parallel()
	e, _ := setup(t)
	ctx := t.Context()
	s := record.NewStore(e.Records(), record.Options{})
	if err := s.RegisterGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if _, err := s.Save(ctx, record.Record{ID: id, Group: "g", Status: record.Active}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.writer.ExecContext(ctx, "UPDATE records SET lease_incarnation = 9.3e18 WHERE id = 'b'"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimNext(ctx, "g", "o", time.Minute, 2); err == nil {
		t.Fatal("ClaimNext over an unreadable row succeeded")
	}
	var version int64
	if err := e.writer.QueryRowContext(ctx, "SELECT version FROM records WHERE id = 'a'").Scan(&version); err != nil || version != 1 {
		t.Fatalf("record a after the failed ClaimNext: version %d, %v; want 1 (unclaimed)", version, err)
	}
}

// TestRecordFailedSaveCreatesNoTenant: a save refused by its
// compare-and-swap leaves no tenant row behind.
func TestRecordFailedSaveCreatesNoTenant(t *testing.T) {
	t.Parallel()
	e, _ := setup(t)
	ctx := t.Context()
	s := record.NewStore(e.Records(), record.Options{})
	if err := s.RegisterGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(ctx, record.Record{ID: "r", Group: "g", Status: record.Active}); err != nil {
		t.Fatal(err)
	}
	for _, rec := range []record.Record{
		{ID: "r", Group: "g", Tenant: "new", Status: record.Active},               // create of an existing id
		{ID: "r", Group: "g", Tenant: "newer", Status: record.Active, Version: 7}, // stale version
		{ID: "absent", Group: "g", Tenant: "newest", Status: record.Active, Version: 1},
	} {
		if _, err := s.Save(ctx, rec); !errors.Is(err, steaderr.ErrConflict) {
			t.Fatalf("Save(%q, tenant %q): %v, want ErrConflict", rec.ID, rec.Tenant, err)
		}
	}
	var n int
	if err := e.writer.QueryRowContext(ctx, "SELECT count(*) FROM record_tenants WHERE name IS NOT NULL").Scan(&n); err != nil || n != 0 {
		t.Fatalf("named tenants after failed saves: %d, %v; want 0", n, err)
	}
}

// TestRecordSaveAllCancelledIsCanceled: a SaveAll whose context is
// cancelled part way through its transaction reports context.Canceled,
// whichever statement, or the commit, found the transaction gone.
func TestRecordSaveAllCancelledIsCanceled(t *testing.T) {
	t.Parallel()
	e, _ := setup(t)
	ctx := t.Context()
	s := record.NewStore(e.Records(), record.Options{})
	if err := s.RegisterGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	recs := make([]record.Record, 300)
	for i := range recs {
		recs[i] = record.Record{ID: fmt.Sprintf("r%03d", i), Group: "g", Tenant: fmt.Sprintf("t%d", i%7), Status: record.Active}
	}
	failed := 0
	for n := 0; n < 60; n++ {
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(time.Duration(n%20)*200*time.Microsecond, cancel)
		for i := range recs {
			recs[i].Version = 0
			recs[i].ID = fmt.Sprintf("r%d-%03d", n, i)
		}
		for i, res := range s.SaveAll(cctx, recs) {
			if res.Err == nil {
				continue
			}
			failed++
			if !errors.Is(res.Err, context.Canceled) {
				t.Fatalf("round %d: SaveAll record %d: %v; want context.Canceled in the chain", n, i, res.Err)
			}
		}
		cancel()
	}
	if failed == 0 {
		t.Fatal("no SaveAll was cancelled; the test checked nothing")
	}
}
