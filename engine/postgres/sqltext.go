package postgres

import "strings"

// schemaPlaceholder stands for the engine's quoted schema in every SQL
// template. Each statement is written whole, as one constant, so it can be
// read (and diffed) as the server sees it; render substitutes the schema
// once, when the engine opens.
const schemaPlaceholder = "{schema}"

// render returns the statement tmpl with the engine's quoted schema in
// place of every {schema}.
func (e *Engine) render(tmpl string) string {
	return strings.ReplaceAll(tmpl, schemaPlaceholder, e.ident)
}
