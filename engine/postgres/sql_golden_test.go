package postgres

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/jackc/pgx/v5"
)

var update = flag.Bool("update", false, "rewrite testdata/sql from the engine's statements")

// goldenSchema is a schema name a careless quoting would break: a double
// quote, a space, a dot, a semicolon, mixed case and non-ASCII.
const goldenSchema = `St"ead. sch;ema-ñ`

// TestSQLGolden renders every statement template of the engine — each
// package-level constant named sqlXxx, found in the package's source so
// that none can be left out — with a hostile schema name and compares it
// with testdata/sql/sqlXxx.sql, so a review sees the SQL the server runs.
// A template must be one string literal: a statement assembled from parts
// cannot be read whole. Run with -update to rewrite the files.
func TestSQLGolden(t *testing.T) {
	templates := sqlTemplates(t)
	if len(templates) == 0 {
		t.Fatal("no sqlXxx templates found")
	}
	e := &Engine{schema: goldenSchema, ident: pgx.Identifier{goldenSchema}.Sanitize()}
	dir := filepath.Join("testdata", "sql")
	for name, tmpl := range templates {
		got := e.render(tmpl) + "\n"
		if strings.Contains(got, schemaPlaceholder) {
			t.Errorf("%s: %s left after rendering", name, schemaPlaceholder)
		}
		path := filepath.Join(dir, name+".sql")
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s: %v (run go test -run TestSQLGolden -update)", name, err)
			continue
		}
		if got != string(want) {
			t.Errorf("%s: rendered statement differs from %s (run with -update and review the diff):\n%s", name, path, got)
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".sql")
		if _, ok := templates[name]; !ok {
			if *update {
				os.Remove(f)
				continue
			}
			t.Errorf("%s has no template %s: remove it (or run with -update)", f, name)
		}
	}
}

// sqlTemplates returns every package-level constant of the package's
// non-test source named sql followed by an upper-case letter, by name. It
// fails t for such a constant that is not a single string literal.
func sqlTemplates(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	paths, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, path := range slices.DeleteFunc(paths, func(p string) bool { return strings.HasSuffix(p, "_test.go") }) {
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, ident := range vs.Names {
					if !isTemplateName(ident.Name) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Errorf("%s: %s is not one string literal: write the statement whole", fset.Position(ident.Pos()), ident.Name)
						continue
					}
					s, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out[ident.Name] = s
				}
			}
		}
	}
	return out
}

func isTemplateName(name string) bool {
	rest, ok := strings.CutPrefix(name, "sql")
	return ok && rest != "" && unicode.IsUpper([]rune(rest)[0])
}
