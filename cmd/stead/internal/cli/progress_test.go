package cli

import (
	"bytes"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/gc"
)

// clean checks that the terminal ends showing exactly want, cursor on the
// empty line after it: no bar, spinner or part of one left over.
func clean(t *testing.T, scr *screen, want string) {
	t.Helper()
	if got := scr.String(); got != want {
		t.Errorf("last screen:\n%s\nwant:\n%s", got, want)
	}
}

// collectable opens the store at db on a clock an hour behind, puts
// values and sweeps once there: each value's pin has lapsed by the real
// clock, and the first is staged, overdue. The store declares no
// liveness: a sweep deletes only with AllUnreferenced.
func collectable(t *testing.T, db string, values ...string) {
	t.Helper()
	ctx := t.Context()
	past := time.Now().Add(-2 * time.Hour)
	st, err := stead.Open(ctx, db, stead.WithClock(func() time.Time { return past }), stead.WithGCGrace(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	put := func(v string) {
		if _, err := st.Blobs.Put(ctx, strings.NewReader(v)); err != nil {
			t.Fatal(err)
		}
	}
	put(values[0])
	past = past.Add(time.Hour)
	if rep, err := st.GC.Sweep(ctx, gc.SweepOptions{AllUnreferenced: true}); err != nil || rep.Staged != 1 {
		t.Fatalf("sweep an hour ago = %v, %v; want the first value staged", rep, err)
	}
	for _, v := range values[1:] {
		put(v)
	}
}

// TestGCProgress runs stead gc with stdout and stderr on one terminal: a
// bar over the candidates due, when they can be counted, then a spinner,
// erased before the report (or the error) is printed, and nothing drawn
// after it.
func TestGCProgress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args   []string
		code   int
		report string // or the error
		bar    string // drawn before the report, if not ""
	}{
		{[]string{"gc", "--dry-run"}, 0, "dry run (would): reaped 1 pins, 0 refs and 0 uploads, took 1 candidates: deleted 1 (3 bytes)", ""},
		{[]string{"gc", "--all-unreferenced"}, 0, "reaped 1 pins, 0 refs and 0 uploads, took 1 candidates: deleted 1 (3 bytes)", "(0/1, "},
		{[]string{"gc"}, 1, "stead gc: gc sweep: stead: protected: the store never declared liveness", ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			db := storeURL(t)
			collectable(t, db, "old", "new")
			scr := newScreen(t)
			if code := runOnTerminal(t, scr, nil, scr, append([]string{"--db", db}, tc.args...)...); code != tc.code {
				t.Fatalf("stead %v = %d, screen:\n%s", tc.args, code, scr)
			}
			lines := strings.Split(scr.String(), "\n")
			if len(lines) != 2 || !strings.HasPrefix(lines[0], tc.report) || lines[1] != "" {
				t.Errorf("last screen:\n%s\nwant the report alone (%s…), then an empty line", scr, tc.report)
			}
			drawn := strings.Join(scr.Drawn(), "\n")
			if !strings.Contains(drawn, "⠋ gc: ") || !strings.Contains(drawn, tc.bar) {
				t.Errorf("drawn before the report:\n%s\nwant a spinner and a bar showing %q", drawn, tc.bar)
			}
		})
	}
}

// TestTransferProgress moves a value of several chunks in and out with
// stderr on a terminal: a bar showing the bytes done and their total
// whenever the data goes elsewhere than the terminal, and a clean
// terminal after it.
func TestTransferProgress(t *testing.T) {
	t.Parallel()
	// Printable, so that it may be written to the terminal too.
	value := make([]byte, 2_500_000) // more chunks than one
	rand.NewChaCha8([32]byte{1}).Read(value)
	for i, b := range value {
		value[i] = 'a' + b%26
	}
	key := blob.KeyOf(value).String()
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	if err := os.WriteFile(in, value, 0o644); err != nil {
		t.Fatal(err)
	}
	db := storeURL(t)
	sized := regexp.MustCompile(`^(put|get|scrub) +\d+% \|[█ ]+\| \([\d.]+( [kMG]?B)?/2\.5 MB(, [\d.]+ [kMG]?B/s)?\)`)
	spinning := regexp.MustCompile(`^[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] put +\( ?[\d.]+ [kMG]?B(, [\d.]+ [kMG]?B/s)?\)`)
	for _, tc := range []struct {
		name   string
		stdin  io.Reader
		toTerm bool // stdout is the terminal
		args   []string
		stdout string
		drawn  *regexp.Regexp // nil: nothing drawn
	}{
		{"put FILE", nil, false, []string{"put", in}, key + "\n", sized},
		{"put stdin", bytes.NewReader(value), false, []string{"put", "-"}, key + "\n", spinning},
		{"get > file", nil, false, []string{"get", key}, string(value), sized},
		{"get -o", nil, true, []string{"get", key, "-o", filepath.Join(dir, "out")}, "", sized},
		{"get to the terminal", nil, true, []string{"get", key}, "", nil},
		{"scrub", nil, false, []string{"scrub"}, "", sized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scr := newScreen(t)
			var stdout io.Writer = &bytes.Buffer{}
			if tc.toTerm {
				stdout = scr
			}
			code := runOnTerminal(t, scr, tc.stdin, stdout, append([]string{"--db", db}, tc.args...)...)
			if code != 0 {
				t.Fatalf("stead %v = %d, screen:\n%s", tc.args, code, scr)
			}
			if b, ok := stdout.(*bytes.Buffer); ok && b.String() != tc.stdout {
				t.Errorf("stead %v wrote %d bytes to stdout, want %d", tc.args, b.Len(), len(tc.stdout))
			}
			drawn := scr.Drawn()
			switch {
			case tc.drawn == nil && len(drawn) > 0 && !tc.toTerm:
				t.Errorf("stead %v drew %q, want nothing", tc.args, drawn)
			case tc.drawn != nil && !slices.ContainsFunc(drawn, tc.drawn.MatchString):
				t.Errorf("stead %v drew %q, want a line matching %s", tc.args, drawn, tc.drawn)
			}
			want := ""
			switch tc.name {
			case "get to the terminal":
				want = string(value)
			case "scrub":
				want = "scrubbed 1 blobs, 2500000 bytes: 0 corrupt\n"
			}
			if got := scr.String(); got != want {
				t.Errorf("last screen (%d bytes):\n%.200s\nwant:\n%.200s", len(got), got, want)
			}
		})
	}
}

// TestScrubProgress has scrub report a corrupt blob, on stdout, while its
// bar is drawn on the same terminal: the bar is erased first, so the key
// and why it is corrupt are a line of their own.
func TestScrubProgress(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "stead.db")
	db := "sqlite://" + path
	st := openStore(t, db)
	var keys []blob.Key
	for i := range 2 {
		value := make([]byte, 2*blob.InlineLimit)
		rand.NewChaCha8([32]byte{byte(i)}).Read(value)
		key, err := st.Blobs.Put(t.Context(), bytes.NewReader(value))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	first := slices.MinFunc(keys, blob.Key.Compare)
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Exec("UPDATE blob_chunks SET data = zeroblob(length(data)) WHERE chunks = (SELECT chunks FROM blobs WHERE key = ?)", first.String()); err != nil {
		t.Fatal(err)
	}
	scr := newScreen(t)
	if code := runOnTerminal(t, scr, nil, scr, "--db", db, "scrub"); code != exitCorrupt {
		t.Fatalf("scrub = %d, screen:\n%s", code, scr)
	}
	want := fmt.Sprintf("%s: blob read %[1]s: stead: corrupt: stored content hashes to %s\nscrubbed 2 blobs, %d bytes: 1 corrupt\n", first, blob.KeyOf(make([]byte, 2*blob.InlineLimit)), 4*blob.InlineLimit)
	if got := scr.String(); got != want {
		t.Errorf("last screen:\n%s\nwant:\n%s", got, want)
	}
}

// TestBenchProgress runs stead bench on a terminal: a bar over its run,
// then one over its clean-up, both erased before the table and the
// clean-up's line are printed.
func TestBenchProgress(t *testing.T) {
	t.Parallel()
	scr := newScreen(t)
	if code := runOnTerminal(t, scr, nil, scr, "--db", storeURL(t), "bench", "--duration", "20ms", "--concurrency", "1"); code != 0 {
		t.Fatalf("bench = %d, screen:\n%s", code, scr)
	}
	lines := strings.Split(scr.String(), "\n")
	if len(lines) != 11 || !strings.HasPrefix(lines[0], "stead bench: ") || !strings.HasPrefix(lines[9], "removed 1 records and ") || lines[10] != "" {
		t.Errorf("last screen:\n%s\nwant the table, the clean-up's line, then an empty line", scr)
	}
	if drawn := scr.Drawn(); !slices.ContainsFunc(drawn, regexp.MustCompile(`^bench(: [a-z +()]+)? +\d+% \|`).MatchString) {
		t.Errorf("drawn before the table:\n%s\nwant the bench's bar", strings.Join(drawn, "\n"))
	}
}

// TestPutProgressOnError: a put whose store cannot be opened leaves no
// bar behind its error.
func TestPutProgressOnError(t *testing.T) {
	t.Parallel()
	scr := newScreen(t)
	if code := runOnTerminal(t, scr, strings.NewReader("value"), &bytes.Buffer{}, "--db", "nope://", "put", "-"); code != 1 {
		t.Fatalf("put to nope:// = %d, screen:\n%s", code, scr)
	}
	want := "stead put: nope://: open: stead: invalid argument: unknown URL scheme \"nope\": want mem://, sqlite://, postgres:// or http(s)://\n"
	if got := scr.String(); got != want {
		t.Errorf("last screen:\n%s\nwant:\n%s", got, want)
	}
}
