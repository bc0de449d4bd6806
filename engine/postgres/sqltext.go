package postgres

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// schemaPlaceholder stands for the engine's quoted schema in every SQL
// template. Each statement is written whole, as one string, so it can be
// read (and diffed) as the server sees it; an engine renders every
// declared statement for its schema once, when it opens.
const schemaPlaceholder = "{schema}"

// statement is one SQL template of the engine, declared once at package
// level with declare; Engine.sql returns its text for the engine's schema.
type statement struct {
	name  string
	tmpl  string
	index int
}

// statements holds every declared statement, in declaration order.
var statements []*statement

// declare registers the template tmpl under name (the variable it is
// assigned to, so testdata/sql/name.sql holds its rendered text).
func declare(name, tmpl string) *statement {
	s := &statement{name: name, tmpl: tmpl, index: len(statements)}
	statements = append(statements, s)
	return s
}

// renderStatements returns every declared statement with ident, the quoted
// schema, in place of every {schema}, indexed as declared.
func renderStatements(ident string) []string {
	out := make([]string, len(statements))
	for i, s := range statements {
		out[i] = strings.ReplaceAll(s.tmpl, schemaPlaceholder, ident)
	}
	return out
}

// newEngine returns an engine for schema with its statements rendered and
// nothing connected.
func newEngine(schema string) *Engine {
	ident := pgx.Identifier{schema}.Sanitize()
	return &Engine{schema: schema, ident: ident, stmts: renderStatements(ident)}
}

// sql returns s rendered for the engine's schema.
func (e *Engine) sql(s *statement) string { return e.stmts[s.index] }
