// Package migrate loads an engine's embedded, versioned SQL migrations.
// Applying them is engine mechanics; the rules for the files live here.
package migrate

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
)

// Migration is one versioned schema change.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

var fileName = regexp.MustCompile(`^([0-9]{4})_([a-z0-9_]+)\.sql$`)

// Load reads the migrations in dir of fsys, named NNNN_name.sql. Versions
// must run 1, 2, 3, … without gaps or repeats; any other file is an error.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	var out []Migration
	for _, e := range entries { // fs.ReadDir sorts by name
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil || e.IsDir() {
			return nil, fmt.Errorf("migrate: %s: not a NNNN_name.sql file", e.Name())
		}
		version, _ := strconv.Atoi(m[1])
		if version != len(out)+1 {
			return nil, fmt.Errorf("migrate: %s: version %d, want %d", e.Name(), version, len(out)+1)
		}
		sql, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
		out = append(out, Migration{Version: version, Name: m[2], SQL: string(sql)})
	}
	return out, nil
}
