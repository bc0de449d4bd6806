package sqlite

import (
	"strings"
	"testing"
)

// TestArbitrationPlan checks with EXPLAIN QUERY PLAN that an arbitration's
// statements read and delete by index from the batch's keys, scanning only
// the bound array: none scans a table.
func TestArbitrationPlan(t *testing.T) {
	t.Parallel()
	e, _ := setup(t)
	for _, c := range []struct {
		query string
		args  []any
		want  []string
	}{
		{sqlArbRead, []any{`["k"]`, 0}, []string{"SEARCH b USING INDEX sqlite_autoindex_blobs_1 (key=?)", "pins", "refs_key", "blob_edges_child", "gc_window"}},
		{sqlArbDeleteBlobs, []any{`[1]`}, []string{"SEARCH blobs USING INTEGER PRIMARY KEY (rowid=?)"}},
		{sqlArbDeleteStage, []any{`["k"]`}, []string{"gc_window"}},
		{sqlArbDeletePins, []any{`["k"]`}, []string{"pins"}},
		{sqlArbDeleteRefs, []any{`["k"]`}, []string{"refs_key"}},
		{sqlArbDeleteEdges, []any{`["k"]`}, []string{"blob_edges"}},
	} {
		rows, err := e.writer.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+c.query, c.args...)
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
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		joined := strings.Join(plan, "\n")
		for _, want := range c.want {
			if !strings.Contains(joined, want) {
				t.Errorf("plan of %q does not use %s:\n%s", c.query, want, joined)
			}
		}
		for _, line := range plan {
			if strings.HasPrefix(line, "SCAN ") && !strings.Contains(line, "VIRTUAL TABLE") {
				t.Errorf("plan of %q scans a table:\n%s", c.query, joined)
			}
		}
	}
}
