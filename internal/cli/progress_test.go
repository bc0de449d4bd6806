package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead"
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
		{[]string{"gc"}, 1, "stead gc: gc sweep: stead: protected: the store declares no liveness", ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			db := storeURL(t)
			collectable(t, db, "old", "new")
			scr := newScreen(t)
			if code := runOnTerminal(t, context.Background(), scr, scr, append([]string{"--db", db}, tc.args...)...); code != tc.code {
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
