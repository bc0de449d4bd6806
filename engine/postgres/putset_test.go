package postgres

import (
	"strings"
	"testing"
)

// TestPutSetStatements: a PutSet's ref statements are the Set statements
// but for their first answer, which refuses.
func TestPutSetStatements(t *testing.T) {
	t.Parallel()
	const setAnswer = "\nSELECT EXISTS (SELECT FROM b), w.name,"
	const refusedAnswer = "\nSELECT CASE WHEN w.name IS NOT NULL THEN true ELSE ('" + refusedMark + ": ' || coalesce(w.name, ''))::int = 0 END, w.name,"
	for _, tc := range []struct{ putSet, set *statement }{{sqlPutSetRef, sqlRefSet}, {sqlPutSetSwap, sqlRefSwap}} {
		if strings.Count(tc.putSet.tmpl, refusedAnswer) != 1 || strings.Replace(tc.putSet.tmpl, refusedAnswer, setAnswer, 1) != tc.set.tmpl {
			t.Errorf("%s is not %s answering %q", tc.putSet.name, tc.set.name, refusedAnswer)
		}
	}
}
