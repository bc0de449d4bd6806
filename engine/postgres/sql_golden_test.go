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
)

var update = flag.Bool("update", false, "rewrite testdata/sql from the engine's statements")

// goldenSchema is a schema name a careless quoting would break: a double
// quote, a space, a dot, a semicolon, mixed case and non-ASCII.
const goldenSchema = `St"ead. sch;ema-ñ`

// TestSQLGolden renders every declared statement of the engine with a
// hostile schema name and compares it with testdata/sql/<name>.sql, so a
// review sees the SQL the server runs. Run with -update to rewrite the
// files.
func TestSQLGolden(t *testing.T) {
	declared := declaredStatements(t)
	if len(statements) == 0 || len(declared) != len(statements) {
		t.Fatalf("%d statements declared in the source, %d registered", len(declared), len(statements))
	}
	e := newEngine(goldenSchema)
	dir := filepath.Join("testdata", "sql")
	names := map[string]bool{}
	for _, s := range statements {
		if names[s.name] {
			t.Errorf("%s declared twice", s.name)
		}
		names[s.name] = true
		if declared[s.name] != s.tmpl {
			t.Errorf("%s: registered under a name its variable does not have", s.name)
		}
		got := e.sql(s) + "\n"
		if strings.Contains(got, schemaPlaceholder) {
			t.Errorf("%s: %s left after rendering", s.name, schemaPlaceholder)
		}
		path := filepath.Join(dir, s.name+".sql")
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s: %v (run go test -run TestSQLGolden -update)", s.name, err)
			continue
		}
		if got != string(want) {
			t.Errorf("%s: rendered statement differs from %s (run with -update and review the diff):\n%s", s.name, path, got)
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".sql")
		if !names[name] {
			if *update {
				os.Remove(f)
				continue
			}
			t.Errorf("%s has no statement %s: remove it (or run with -update)", f, name)
		}
	}
}

// declaredStatements returns the template of every package-level
// `var sqlXxx = declare("sqlXxx", `...`)` of the package's non-test source,
// by variable name. It fails t for a declare call elsewhere, one whose name
// is not its variable's, or one whose template is not a single string
// literal (a statement assembled from parts cannot be read whole).
func declaredStatements(t *testing.T) map[string]string {
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
		atTop := map[*ast.CallExpr]bool{}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.VAR {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, ident := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					call, ok := vs.Values[i].(*ast.CallExpr)
					if !ok || !isDeclare(call) {
						continue
					}
					atTop[call] = true
					if len(call.Args) != 2 || stringLit(t, call.Args[0]) != ident.Name {
						t.Errorf("%s: %s must be declare(%q, `...`)", fset.Position(ident.Pos()), ident.Name, ident.Name)
						continue
					}
					if !isTemplateName(ident.Name) {
						t.Errorf("%s: a statement's name is sql followed by an upper-case letter, not %s", fset.Position(ident.Pos()), ident.Name)
					}
					if _, ok := call.Args[1].(*ast.BasicLit); !ok {
						t.Errorf("%s: %s is not one string literal: write the statement whole", fset.Position(ident.Pos()), ident.Name)
						continue
					}
					out[ident.Name] = stringLit(t, call.Args[1])
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok && isDeclare(call) && !atTop[call] {
				t.Errorf("%s: declare outside a package-level var", fset.Position(call.Pos()))
			}
			return true
		})
	}
	return out
}

func isDeclare(call *ast.CallExpr) bool {
	id, ok := call.Fun.(*ast.Ident)
	return ok && id.Name == "declare"
}

// stringLit returns the value of the string literal e, or "" if e is none.
func stringLit(t *testing.T, e ast.Expr) string {
	t.Helper()
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return ""
	}
	s, err := strconv.Unquote(lit.Value)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func isTemplateName(name string) bool {
	rest, ok := strings.CutPrefix(name, "sql")
	return ok && rest != "" && unicode.IsUpper([]rune(rest)[0])
}
