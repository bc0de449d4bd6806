package sqlengine

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
)

// Migration is one versioned schema change of an engine. Applying it is
// the engine's mechanics; the rules for the files are LoadMigrations'.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

var migrationFile = regexp.MustCompile(`^([0-9]{4})_([a-z0-9_]+)\.sql$`)

// LoadMigrations reads the migrations in dir of fsys, named
// NNNN_name.sql. Versions must run 1, 2, 3, … without gaps or repeats; any
// other file is an error.
func LoadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	var out []Migration
	for _, e := range entries { // fs.ReadDir sorts by name
		m := migrationFile.FindStringSubmatch(e.Name())
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
