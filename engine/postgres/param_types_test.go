package postgres_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/steadkit/stead/engine/postgres"
	"github.com/steadkit/stead/internal/testing/pgtest"
)

// smallParams are the int4 parameters that are small by construction,
// by statement and position: a page size bounded by MaxDeleteBatch, a
// migration's number, a 0/1 flag.
var smallParams = map[string]int{"sqlStageRange": 2, "sqlInsertVersion": 1}

// namedParam is a pgx named argument in a statement's text.
var namedParam = regexp.MustCompile(`@[a-z_]+`)

// TestStatementParamTypes prepares every statement the engine runs on a
// migrated schema and checks that PostgreSQL types none of its parameters
// int2 or int4: the engine passes Go's 64-bit integers (sizes, offsets,
// microseconds), and a parameter PostgreSQL infers as int4 from its
// context (compared with a literal 0, say) refuses any of them past
// 2^31-1 at run time, on values no small test reaches.
func TestStatementParamTypes(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	e := open(t, db, "")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for name, text := range postgres.Statements(e) {
		// Named arguments become positional ones, as pgx rewrites them.
		seen := map[string]string{}
		text = namedParam.ReplaceAllStringFunc(text, func(p string) string {
			if _, ok := seen[p]; !ok {
				seen[p] = "$" + strconv.Itoa(len(seen)+1)
			}
			return seen[p]
		})
		sd, err := conn.Prepare(ctx, "", text)
		if err != nil {
			t.Errorf("%s: prepare: %v", name, err)
			continue
		}
		for i, oid := range sd.ParamOIDs {
			if (oid == 21 || oid == 23) && smallParams[name] != i+1 {
				t.Errorf("%s: parameter $%d is typed int2/int4 (OID %d): cast it (::bigint)", name, i+1, oid)
			}
		}
	}
}
