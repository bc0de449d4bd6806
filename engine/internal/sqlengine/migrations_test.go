package sqlengine

import (
	"testing"
	"testing/fstest"
)

func TestLoadMigrations(t *testing.T) {
	t.Parallel()
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	tests := []struct {
		name    string
		files   fstest.MapFS
		want    []int
		wantErr bool
	}{
		{"ordered", fstest.MapFS{"m/0002_b.sql": file("B"), "m/0001_a.sql": file("A")}, []int{1, 2}, false},
		{"empty", fstest.MapFS{"m/.keep": file("")}, nil, true},
		{"gap", fstest.MapFS{"m/0001_a.sql": file("A"), "m/0003_c.sql": file("C")}, nil, true},
		{"starts at two", fstest.MapFS{"m/0002_b.sql": file("B")}, nil, true},
		{"duplicate version", fstest.MapFS{"m/0001_a.sql": file("A"), "m/0001_b.sql": file("B")}, nil, true},
		{"stray file", fstest.MapFS{"m/0001_a.sql": file("A"), "m/README": file("")}, nil, true},
		{"bad name", fstest.MapFS{"m/1_a.sql": file("A")}, nil, true},
		{"missing dir", fstest.MapFS{}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := LoadMigrations(tt.files, "m")
			if tt.wantErr {
				if err == nil {
					t.Fatalf("LoadMigrations = %v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("LoadMigrations = %d migrations, want %d", len(got), len(tt.want))
			}
			for i, m := range got {
				if m.Version != tt.want[i] || m.SQL == "" {
					t.Fatalf("migration %d = %+v", i, m)
				}
			}
		})
	}
}
