//go:build unix

package pgtest

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// needBinaries skips t when PostgreSQL's binaries are absent, or fails it
// under STEAD_REQUIRE_POSTGRES=1.
func needBinaries(t *testing.T) {
	t.Helper()
	if _, err := findBinaries(); err != nil {
		if os.Getenv(envRequire) == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// startTestCluster starts a cluster that t stops if the test does not.
func startTestCluster(t *testing.T) *cluster {
	t.Helper()
	needBinaries(t)
	c, err := startCluster(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.stop(); err != nil {
			t.Error(err)
		}
	})
	return c
}

func TestStartCluster(t *testing.T) {
	t.Parallel()
	c := startTestCluster(t)
	ctx := context.Background()

	conn := connect(t, c.url)
	settings := map[string]string{
		"SELECT 1::text":                               "1",
		"SELECT current_setting('fsync')":              "off",
		"SELECT current_setting('synchronous_commit')": "on",
		"SELECT current_setting('max_connections')":    "200",
		"SELECT current_setting('listen_addresses')":   "",
		"SELECT current_user::text":                    "postgres",
	}
	for q, want := range settings {
		var got string
		if err := conn.QueryRow(ctx, q).Scan(&got); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if got != want {
			t.Errorf("%s = %q, want %q", q, got, want)
		}
	}

	// As root, the server must run as an unprivileged user.
	if os.Geteuid() == 0 {
		fi, err := os.Stat(filepath.Join(c.dataDir, "postmaster.pid"))
		if err != nil {
			t.Fatal(err)
		}
		uid := fi.Sys().(*syscall.Stat_t).Uid
		want := "postgres"
		if _, err := user.Lookup("postgres"); err != nil {
			want = "nobody"
		}
		u, err := user.Lookup(want)
		if err != nil {
			t.Fatal(err)
		}
		if strconv.FormatUint(uint64(uid), 10) != u.Uid {
			t.Errorf("server runs as uid %d, want %s (%s)", uid, want, u.Uid)
		}
	}

	// The local probe finds the cluster through PGHOST, like libpq.
	u, _, reasons := probeLocal(ctx, env(map[string]string{"PGHOST": c.dir}))
	if want := socketURL(c.dir, clusterPort, "postgres", "", "postgres", "disable"); u != want {
		t.Errorf("probeLocal(PGHOST=%s) = %q (%v), want %q", c.dir, u, reasons, want)
	}
	// A role that does not exist is tried, reported, and not used.
	u, _, reasons = probeLocal(ctx, env(map[string]string{"PGHOST": c.dir, "PGUSER": "nosuchrole"}))
	if u != "" || len(reasons) != 1 {
		t.Errorf("probeLocal(PGUSER=nosuchrole) = %q, %q; want no URL and one reason", u, reasons)
	}

	conn.Close(ctx)
	if err := c.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cluster directory %s still there after stop: %v", c.dir, err)
	}
	if err := ping(ctx, c.url, probeTimeout); err == nil {
		t.Error("cluster still answers after stop")
	}
}

// TestClusterWatchdog checks that a cluster is stopped and removed when the
// test process dies without calling stop: the watchdog's stdin closes.
func TestClusterWatchdog(t *testing.T) {
	t.Parallel()
	c := startTestCluster(t)
	ctx := context.Background()
	if err := ping(ctx, c.url, probeTimeout); err != nil {
		t.Fatal(err)
	}

	c.watchdogIn.Close() // As the kernel does when this process exits.
	if err := c.watchdog.Wait(); err != nil {
		t.Errorf("watchdog: %v", err)
	}
	c.watchdog = nil

	if _, err := os.Stat(c.dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cluster directory %s still there after the watchdog ran: %v", c.dir, err)
	}
	if err := ping(ctx, c.url, probeTimeout); err == nil {
		t.Error("cluster still answers after the watchdog ran")
	}
}

func TestCompareVersions(t *testing.T) {
	t.Parallel()
	ordered := []string{"lib", "9.5", "9.6", "10", "15", "16"}
	for i := range ordered {
		for j := range ordered {
			got := compareVersions(ordered[i], ordered[j])
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got != want {
				t.Errorf("compareVersions(%q, %q) = %d, want %d", ordered[i], ordered[j], got, want)
			}
		}
	}
}

func TestConfQuote(t *testing.T) {
	t.Parallel()
	if got, want := confQuote(`/tmp/a'b\c`), `'/tmp/a''b\\c'`; got != want {
		t.Errorf("confQuote = %s, want %s", got, want)
	}
}
