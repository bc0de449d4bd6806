//go:build unix

package pgtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgLibDir is where Debian-style packages install one bin directory per
// PostgreSQL major version.
const pgLibDir = "/usr/lib/postgresql"

// clusterStartTimeout bounds initdb plus pg_ctl start.
const clusterStartTimeout = 2 * time.Minute

// clusterPort is the port the throwaway cluster's socket file is named for.
// Nothing listens on TCP, and the socket lives in a private directory, so
// the port never collides with another server.
const clusterPort = "5432"

// maxSocketPath keeps the socket path within the platform's sun_path limit
// (104 bytes on the BSDs, 108 on Linux, including the terminating NUL).
const maxSocketPath = 100

// binaries are the PostgreSQL programs a throwaway cluster needs.
type binaries struct {
	initdb string
	pgCtl  string
}

// findBinaries looks for initdb and pg_ctl on PATH, then under
// /usr/lib/postgresql/<version>/bin, highest version first.
func findBinaries() (binaries, error) {
	initdb, err1 := exec.LookPath("initdb")
	pgCtl, err2 := exec.LookPath("pg_ctl")
	if err1 == nil && err2 == nil {
		return binaries{initdb: initdb, pgCtl: pgCtl}, nil
	}
	dirs, _ := filepath.Glob(filepath.Join(pgLibDir, "*", "bin"))
	slices.SortFunc(dirs, func(a, b string) int {
		// Highest version first.
		return compareVersions(filepath.Base(filepath.Dir(b)), filepath.Base(filepath.Dir(a)))
	})
	for _, dir := range dirs {
		initdb, err1 := exec.LookPath(filepath.Join(dir, "initdb"))
		pgCtl, err2 := exec.LookPath(filepath.Join(dir, "pg_ctl"))
		if err1 == nil && err2 == nil {
			return binaries{initdb: initdb, pgCtl: pgCtl}, nil
		}
	}
	return binaries{}, fmt.Errorf("initdb and pg_ctl not found on PATH or under %s/*/bin", pgLibDir)
}

// compareVersions orders PostgreSQL version directory names such as "9.6",
// "15" and "16" numerically; a name that is not a version sorts lowest.
func compareVersions(a, b string) int {
	pa, pb := versionParts(a), versionParts(b)
	return slices.Compare(pa, pb)
}

func versionParts(s string) []int {
	var parts []int
	for f := range strings.SplitSeq(s, ".") {
		n, err := strconv.Atoi(f)
		if err != nil {
			return []int{-1}
		}
		parts = append(parts, n)
	}
	return parts
}

// cluster is a throwaway PostgreSQL server in a private temporary
// directory, reachable only through a unix socket in that directory.
type cluster struct {
	// url reaches the cluster's postgres database as the postgres superuser.
	url string
	// dir holds the data directory, the log and the socket; stop removes it.
	dir     string
	dataDir string
	bins    binaries
	// cred is the unprivileged user the server runs as when this process
	// is root; nil otherwise.
	cred *syscall.Credential
	// watchdog stops the cluster and removes dir when this process dies
	// without calling stop: it waits for EOF on watchdogIn, whose only
	// writer is this process.
	watchdog   *exec.Cmd
	watchdogIn io.WriteCloser
}

// startCluster initialises and starts a throwaway cluster: trust
// authentication for user postgres, no TCP listener, fsync off and 200
// connections. When this process is root, the cluster runs as the
// postgres user, or nobody if there is none. The caller must call stop.
func startCluster(ctx context.Context) (*cluster, error) { return startClusterWith(ctx, nil) }

// startClusterWith is startCluster with settings, postgresql.conf lines
// ("name = value"), added after the throwaway ones.
func startClusterWith(ctx context.Context, settings []string) (_ *cluster, err error) {
	bins, err := findBinaries()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, clusterStartTimeout)
	defer cancel()

	cred, err := clusterCredential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: dir, dataDir: filepath.Join(dir, "data"), bins: bins, cred: cred}
	defer func() {
		if err != nil {
			if stopErr := c.stop(); stopErr != nil {
				err = fmt.Errorf("%w (and cleaning up: %v)", err, stopErr)
			}
		}
	}()

	if socket := filepath.Join(dir, ".s.PGSQL."+clusterPort); len(socket) > maxSocketPath {
		return nil, fmt.Errorf("socket path %s is longer than %d bytes: set TMPDIR to a shorter directory", socket, maxSocketPath)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}

	if err := c.run(ctx, bins.initdb, "-D", c.dataDir, "-A", "trust", "-U", "postgres",
		"-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		return nil, err
	}
	if err := c.configure(settings); err != nil {
		return nil, err
	}
	if err := c.startWatchdog(); err != nil {
		return nil, err
	}
	if err := c.run(ctx, bins.pgCtl, "start", "-w", "-t", "60", "-s",
		"-D", c.dataDir, "-l", filepath.Join(dir, "postgres.log")); err != nil {
		return nil, fmt.Errorf("%w; server log: %s", err, c.logTail())
	}

	c.url = socketURL(dir, clusterPort, "postgres", "", "postgres", "disable")
	pingCtx, cancelPing := context.WithTimeout(ctx, 10*time.Second)
	defer cancelPing()
	conn, err := pgx.Connect(pingCtx, c.url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := conn.Ping(pingCtx); err != nil {
		return nil, err
	}
	return c, nil
}

// clusterCredential returns the user to run PostgreSQL as: nil when this
// process is not root, else postgres if it exists, else nobody.
func clusterCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var errs []error
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err := errors.Join(err1, err2); err != nil {
			errs = append(errs, fmt.Errorf("user %s: %w", name, err))
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, fmt.Errorf("running as root and no unprivileged user to run PostgreSQL as: %w", errors.Join(errs...))
}

// configure appends the throwaway settings and extra to postgresql.conf;
// later lines win over initdb's.
func (c *cluster) configure(extra []string) error {
	settings := fmt.Sprintf(`
# pgtest: a throwaway cluster.
listen_addresses = ''
unix_socket_directories = %s
port = %s
max_connections = 200
fsync = off
`, confQuote(c.dir), clusterPort) + strings.Join(extra, "\n") + "\n"
	f, err := os.OpenFile(filepath.Join(c.dataDir, "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(settings); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// confQuote quotes s as a postgresql.conf string value.
func confQuote(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// startWatchdog starts a shell, as the cluster's user and in its own
// process group (so a terminal's ^C does not reach it), that blocks reading
// its stdin. The write end stays in this process only (Go opens every
// descriptor close-on-exec), so it reads EOF exactly when this process
// exits or calls stop; it then stops the cluster and removes its directory.
func (c *cluster) startWatchdog() error {
	const script = `read -r _; "$0" stop -D "$1" -m immediate -w; rm -rf "$2"`
	cmd := exec.Command("/bin/sh", "-c", script, c.bins.pgCtl, c.dataDir, c.dir)
	cmd.Dir = c.dir
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting watchdog: %w", err)
	}
	c.watchdog, c.watchdogIn = cmd, in
	return nil
}

// stop shuts the server down immediately, removes its directory and ends
// the watchdog. It is safe to call on a partly started cluster.
func (c *cluster) stop() error {
	var errs []error
	if _, err := os.Stat(filepath.Join(c.dataDir, "postmaster.pid")); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := c.run(ctx, c.bins.pgCtl, "stop", "-D", c.dataDir, "-m", "immediate", "-w", "-s")
		cancel()
		if err != nil {
			errs = append(errs, err)
		}
	}
	if c.watchdog != nil {
		// The server is down; the watchdog has nothing left to do. Kill it
		// rather than close its stdin so it does not race RemoveAll.
		if err := c.watchdog.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, fmt.Errorf("killing watchdog: %w", err))
		}
		_ = c.watchdog.Wait() // Reports the kill.
		c.watchdog = nil
	}
	if err := os.RemoveAll(c.dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stopping throwaway cluster in %s: %w", c.dir, err)
	}
	return nil
}

// halt shuts the server down immediately (as a crash would), keeping its
// data directory so that resume can start it again.
func (c *cluster) halt() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return c.run(ctx, c.bins.pgCtl, "stop", "-D", c.dataDir, "-m", "immediate", "-w", "-s")
}

// resume starts a halted server again and waits until it accepts
// connections.
func (c *cluster) resume() error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterStartTimeout)
	defer cancel()
	if err := c.run(ctx, c.bins.pgCtl, "start", "-w", "-t", "60", "-s",
		"-D", c.dataDir, "-l", filepath.Join(c.dir, "postgres.log")); err != nil {
		return fmt.Errorf("%w; server log: %s", err, c.logTail())
	}
	return nil
}

// run runs a PostgreSQL program as the cluster's user, returning its output
// in the error when it fails.
func (c *cluster) run(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = c.dir // The test's working directory may be unreadable to cred.
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	// pg_ctl start hands the server a log file, not our pipe; should a
	// server ever hold the pipe anyway, do not wait on it forever.
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", filepath.Base(name), args[0], err, strings.TrimSpace(string(out)))
	}
	return nil
}

// logTail returns the end of the server log, for start errors.
func (c *cluster) logTail() string {
	b, err := os.ReadFile(filepath.Join(c.dir, "postgres.log"))
	if err != nil {
		return err.Error()
	}
	const max = 2000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return strings.TrimSpace(string(b))
}

// childEnv is this process's environment without libpq's PG* variables,
// which would otherwise steer initdb, pg_ctl and the server, and with the
// C locale so initdb never trips on an uninstalled one.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C", "LANG=C")
}
