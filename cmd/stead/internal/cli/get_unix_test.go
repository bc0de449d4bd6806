//go:build unix

package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestGetOutputKeepsTarget checks that get -o writes into what the path
// names: an existing file keeps its mode, a symlink stays a link and its
// target gets the value, a FIFO stays a FIFO and its reader gets the value.
func TestGetOutputKeepsTarget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := "sqlite://" + filepath.Join(dir, "s.db")
	in := filepath.Join(dir, "in")
	os.WriteFile(in, []byte("hello, stead"), 0o644)
	code, stdout, stderr := run(t, ctx, "--db", db, "put", in)
	key := strings.TrimSpace(stdout)
	if code != 0 {
		t.Fatalf("put = %d %q", code, stderr)
	}
	get := func(out string) {
		t.Helper()
		if code, _, stderr := run(t, ctx, "--db", db, "get", key, "-o", out); code != 0 {
			t.Fatalf("get -o %s = %d %q", out, code, stderr)
		}
	}

	existing := filepath.Join(dir, "existing")
	os.WriteFile(existing, []byte("old"), 0o644)
	os.Chmod(existing, 0o644)
	get(existing)
	if fi, err := os.Stat(existing); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("existing 0644 file after get: %v %v, want mode 0644", fi.Mode(), err)
	}

	target := filepath.Join(dir, "target")
	os.WriteFile(target, []byte("old"), 0o644)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	get(link)
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("link after get: %v %v, want still a symlink", fi.Mode(), err)
	}
	if b, _ := os.ReadFile(target); string(b) != "hello, stead" {
		t.Errorf("link target after get = %q, want the value", b)
	}

	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	read := make(chan string, 1)
	go func() {
		b, _ := os.ReadFile(fifo) // blocks until get opens it
		read <- string(b)
	}()
	get(fifo)
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("fifo after get: %v %v, want still a FIFO", fi.Mode(), err)
	} else if got := <-read; got != "hello, stead" {
		t.Errorf("FIFO reader got %q, want the value", got)
	}

	fresh := filepath.Join(dir, "fresh")
	get(fresh)
	if b, _ := os.ReadFile(fresh); string(b) != "hello, stead" {
		t.Errorf("new file = %q", b)
	}
}

// TestNotFoundHidesDriverText: get and records show of something missing
// say not found without the driver's words.
func TestNotFoundHidesDriverText(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := "sqlite://" + filepath.Join(t.TempDir(), "s.db")
	for _, args := range [][]string{{"get", "sha256:" + strings.Repeat("0", 64)}, {"records", "show", "x"}} {
		code, _, stderr := run(t, ctx, append([]string{"--db", db}, args...)...)
		if code == 0 || !strings.Contains(stderr, "not found") || strings.Contains(stderr, "rows") || strings.Contains(stderr, "sql:") {
			t.Errorf("stead %v = %d %q, want not found without driver text", args, code, stderr)
		}
	}
}
