package sqlite

import (
	"errors"
	"strings"
	"testing"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/steadkit/stead/record"
)

// TestRecordClaimingUsesGroupIndex checks with EXPLAIN QUERY PLAN that the
// claimable listing, ClaimNext and Probe search the claiming indexes by
// group: neither other groups' records nor live leases are read.
func TestRecordClaimingUsesGroupIndex(t *testing.T) {
	t.Parallel()
	e, _ := setup(t)
	r := &e.records
	for _, q := range []string{r.list.query, r.claimNext.query, r.probe.query} {
		rows, err := e.writer.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+q, "g", 0, 10, "g", 10)
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
