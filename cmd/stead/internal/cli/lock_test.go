package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine/enginetest/testkit"
	"github.com/steadkit/stead/engine/sqlite"
	"github.com/steadkit/stead/lock"
)

// storeURL returns the URL of a fresh SQLite store.
func storeURL(t *testing.T) string {
	t.Helper()
	return "sqlite://" + filepath.Join(t.TempDir(), "stead.db")
}

func openStore(t *testing.T, url string) *stead.Store {
	t.Helper()
	st, err := stead.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

type result struct {
	code           int
	stdout, stderr *testkit.Buffer
}

// startCLI runs the stead command line args in the background.
func startCLI(ctx context.Context, args ...string) (<-chan int, *testkit.Buffer, *testkit.Buffer) {
	stdout, stderr := &testkit.Buffer{}, &testkit.Buffer{}
	done := make(chan int, 1)
	go func() { done <- Run(ctx, args, stdout, stderr) }()
	return done, stdout, stderr
}

func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	done, stdout, stderr := startCLI(t.Context(), args...)
	return result{waitCLI(t, done), stdout, stderr}
}

func waitCLI(t *testing.T, done <-chan int) int {
	t.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(testkit.Timeout):
		t.Fatalf("stead did not finish within %v", testkit.Timeout)
		return 0
	}
}

func TestLockRunsCommand(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	r := runCLI(t, "--db", url, "lock", "--ttl", "5s", "job", "--", "sh", "-c", "echo under the lock; exit 3")
	if r.code != 3 || r.stdout.String() != "under the lock\n" || r.stderr.String() != "" {
		t.Fatalf("stead lock = exit %d, stdout %q, stderr %q; want exit 3 and the command's output", r.code, r.stdout, r.stderr)
	}
	lk, ok, err := openStore(t, url).Locks.TryLock(t.Context(), "job", "after", time.Minute)
	if err != nil || !ok || lk.Token() != 2 {
		t.Fatalf("TryLock after stead lock = %v, %v; want the released lock's second grant", ok, err)
	}
}

func TestLockExitStatus(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	for _, tc := range []struct {
		script string
		want   int
	}{{"exit 0", 0}, {"exit 42", 42}, {"kill -TERM $$", 128 + 15}} {
		if r := runCLI(t, "--db", url, "lock", "job", "--", "sh", "-c", tc.script); r.code != tc.want {
			t.Errorf("stead lock -- sh -c %q = exit %d (stderr %q), want %d", tc.script, r.code, r.stderr, tc.want)
		}
	}
}

func TestLockTryBusy(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	if _, ok, err := openStore(t, url).Locks.TryLock(t.Context(), "job", "holder", time.Hour); !ok || err != nil {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	r := runCLI(t, "--db", url, "lock", "--try", "job", "--", "sh", "-c", "echo ran")
	if r.code != exitBusy || r.stdout.String() != "" || !strings.Contains(r.stderr.String(), "held by another owner") {
		t.Fatalf("stead lock -try of a held lock = exit %d, stdout %q, stderr %q; want exit %d, the command not run", r.code, r.stdout, r.stderr, exitBusy)
	}
}

func TestLockWaits(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	lk, ok, err := openStore(t, url).Locks.TryLock(t.Context(), "job", "holder", time.Hour)
	if !ok || err != nil {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	done, stdout, stderr := startCLI(t.Context(), "--db", url, "lock", "job", "--", "sh", "-c", "echo ran")
	testkit.Until(t, "stead lock to wait", func() bool { return strings.Contains(stderr.String(), `waiting for "job"`) })
	if stdout.String() != "" {
		t.Fatal("the command ran while another owner held the lock")
	}
	if ok, err := lk.Release(t.Context()); !ok || err != nil {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	if code := waitCLI(t, done); code != 0 || stdout.String() != "ran\n" {
		t.Fatalf("stead lock after the release = exit %d, stdout %q", code, stdout)
	}
}

// TestLockLost steals the lock from under a running command: the command's
// whole process group is killed (the sleep in the background holds stdout
// open, so stead returns only once it is dead too) and stead exits 76.
func TestLockLost(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "stead.db")
	done, stdout, stderr := startCLI(t.Context(), "--db", "sqlite://"+path, "lock", "--ttl", "300ms", "job", "--",
		"sh", "-c", "sleep 60 & echo started; wait")
	testkit.Until(t, "the command to start", func() bool { return stdout.String() == "started\n" })

	eng, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	res, err := eng.Locks().Acquire(t.Context(), lock.AcquireParams{Name: "job", Owner: "thief", TTL: time.Hour, Now: time.Now().Add(time.Hour)})
	if err != nil || !res.Granted {
		t.Fatalf("stealing the lock an hour ahead: %+v, %v", res, err)
	}
	if code := waitCLI(t, done); code != exitLost || !strings.Contains(stderr.String(), "lease lost") {
		t.Fatalf("stead lock whose lock was stolen = exit %d, stderr %q; want exit %d", code, stderr, exitLost)
	}
}

func TestLockInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	done, stdout, _ := startCLI(ctx, "--db", storeURL(t), "lock", "job", "--",
		"sh", "-c", "trap 'echo terminated; exit 7' TERM; echo started; while :; do sleep 0.01; done")
	testkit.Until(t, "the command to start", func() bool { return stdout.String() == "started\n" })
	cancel()
	if code := waitCLI(t, done); code != 7 || stdout.String() != "started\nterminated\n" {
		t.Fatalf("interrupted stead lock = exit %d, stdout %q; want the command's SIGTERM handler's exit 7", code, stdout)
	}
}

func TestLockUsage(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	for _, args := range [][]string{
		{"job", "sh", "-c", "true"},
		{"job", "--"},
		{"--", "true"},
		{"bad\nname", "--", "true"},
		{"--ttl", "0s", "job", "--", "true"},
		{"--owner", "", "job", "--", "true"},
		{"--ttl", "soon", "job", "--", "true"},
	} {
		if r := runCLI(t, append([]string{"--db", url, "lock"}, args...)...); r.code != 2 || r.stdout.String() != "" {
			t.Errorf("stead lock %q = exit %d, stdout %q; want 2", args, r.code, r.stdout)
		}
	}
}
