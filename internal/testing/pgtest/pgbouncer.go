//go:build unix

package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// bouncerStartTimeout bounds starting PgBouncer until it answers.
const bouncerStartTimeout = 30 * time.Second

// bouncer is a PgBouncer in transaction pooling mode in front of the
// shared test server, listening on a free loopback port.
type bouncer struct {
	host string // 127.0.0.1:port
	user string // the server's user, allowed by PgBouncer's auth file
	dir  string // config, auth file and log; removed by stop
	// What start needs to start it again on the same port.
	bin    string
	server *pgconn.Config
	cred   *syscall.Credential
	port   int // 0: pick a free one
	cmd    *exec.Cmd
	// exited receives cmd's exit.
	exited chan error
	// watchdog kills PgBouncer and removes dir should this process die
	// without calling stop: it waits for EOF on watchdogIn, whose only
	// writer is this process.
	watchdog   *exec.Cmd
	watchdogIn interface{ Close() error }
}

var (
	bouncerOnce   sync.Once
	sharedBouncer *bouncer
	bouncerErr    error
)

// ViaPgBouncer returns a copy of d whose URL reaches the same database
// through a real PgBouncer in transaction pooling mode, as the server's
// user (not NewOwned's role); Schema and Admin are d's. The PgBouncer starts once per test process (Main stops it),
// from the pgbouncer binary on PATH or in /usr/sbin, on a free loopback
// port, as an unprivileged user when the tests run as root. When it is not
// installed t is skipped, loudly, or failed under
// STEAD_REQUIRE_PGBOUNCER=1.
func (d *DB) ViaPgBouncer(t testing.TB) *DB {
	t.Helper()
	return via(t, needBouncer(t), d)
}

// ViaPgBouncerIfAny is ViaPgBouncer where PgBouncer is installed; where it
// is not, it logs that loudly and returns d itself (or fails t under
// STEAD_REQUIRE_PGBOUNCER=1), for suites whose PgBouncer-safe mode should
// run either way.
func (d *DB) ViaPgBouncerIfAny(t testing.TB) *DB {
	t.Helper()
	serverURL := need(t)
	bouncerOnce.Do(func() { sharedBouncer, bouncerErr = startBouncer(serverURL) })
	if bouncerErr != nil {
		if os.Getenv(envRequireBouncer) == "1" {
			t.Fatal("pgtest: PGBOUNCER NOT AVAILABLE: " + bouncerErr.Error())
		}
		t.Log("pgtest: PGBOUNCER NOT AVAILABLE, connecting directly instead: " + bouncerErr.Error())
		return d
	}
	return via(t, sharedBouncer, d)
}

// via returns a copy of d whose URL reaches d's database through b.
func via(t testing.TB, b *bouncer, d *DB) *DB {
	t.Helper()
	cfg, err := pgconn.ParseConfig(d.URL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	u := url.URL{Scheme: "postgres", User: url.User(b.user), Host: b.host, Path: "/" + cfg.Database, RawQuery: "sslmode=disable"}
	via := *d
	via.URL = u.String()
	return &via
}

// PgBouncer is a PgBouncer of a test's own, which it may stop and start
// again: for tests of what a client sees while the pooler restarts.
type PgBouncer struct{ b *bouncer }

// NewPgBouncer starts a PgBouncer for t in front of the test server, like
// the one ViaPgBouncer shares, stopped when t ends; it skips or fails t
// alike when PgBouncer is not installed.
func NewPgBouncer(t testing.TB) *PgBouncer {
	t.Helper()
	serverURL := need(t)
	b, err := startBouncer(serverURL)
	if err != nil {
		noBouncer(t, err)
	}
	t.Cleanup(func() {
		if err := b.stop(); err != nil {
			t.Error(err)
		}
	})
	return &PgBouncer{b}
}

// Via returns a copy of d whose URL reaches d's database through p.
func (p *PgBouncer) Via(t testing.TB, d *DB) *DB {
	t.Helper()
	return via(t, p.b, d)
}

// Stop kills PgBouncer: its connections drop and new ones are refused
// until Start.
func (p *PgBouncer) Stop(t testing.TB) {
	t.Helper()
	if err := p.b.stopProcesses(); err != nil {
		t.Fatalf("pgtest: stopping PgBouncer: %v", err)
	}
}

// Start starts a stopped PgBouncer again on the same port.
func (p *PgBouncer) Start(t testing.TB) {
	t.Helper()
	if err := p.b.start(); err != nil {
		t.Fatalf("pgtest: starting PgBouncer again: %v", err)
	}
}

// needBouncer returns the shared PgBouncer, or skips or fails t.
func needBouncer(t testing.TB) *bouncer {
	t.Helper()
	serverURL := need(t)
	bouncerOnce.Do(func() { sharedBouncer, bouncerErr = startBouncer(serverURL) })
	if bouncerErr != nil {
		noBouncer(t, bouncerErr)
	}
	return sharedBouncer
}

// noBouncer skips t, loudly, for want of PgBouncer, or fails it under
// STEAD_REQUIRE_PGBOUNCER=1.
func noBouncer(t testing.TB, err error) {
	t.Helper()
	msg := "pgtest: PGBOUNCER NOT AVAILABLE, tests through PgBouncer not run: " + err.Error()
	if os.Getenv(envRequireBouncer) == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// findBouncer looks for pgbouncer on PATH, then in /usr/sbin (Debian's
// package puts it there, outside a normal user's PATH).
func findBouncer() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if p, err := exec.LookPath("/usr/sbin/pgbouncer"); err == nil {
		return p, nil
	}
	return "", errors.New("pgbouncer not found on PATH or in /usr/sbin (Debian: apt-get install pgbouncer)")
}

// startBouncer starts PgBouncer in front of the server at serverURL.
func startBouncer(serverURL string) (_ *bouncer, err error) {
	bin, err := findBouncer()
	if err != nil {
		return nil, err
	}
	server, err := pgconn.ParseConfig(serverURL)
	if err != nil {
		return nil, err
	}
	cred, err := clusterCredential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgbouncer-")
	if err != nil {
		return nil, err
	}
	b := &bouncer{user: server.User, dir: dir, bin: bin, server: server, cred: cred}
	defer func() {
		if err != nil {
			err = errors.Join(err, b.stop())
		}
	}()
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	// A port another process takes between Listen and PgBouncer's bind
	// fails the start; try a few.
	for range 3 {
		if err = b.start(); err == nil {
			return b, nil
		}
		b.port = 0
		if stopErr := b.stopProcesses(); stopErr != nil {
			return nil, errors.Join(err, stopErr)
		}
	}
	return nil, err
}

// start writes the configuration for b.port, or a fresh free port, and
// starts PgBouncer, waiting until it answers.
func (b *bouncer) start() error {
	bin, server, cred := b.bin, b.server, b.cred
	if b.port == 0 {
		port, err := freePort()
		if err != nil {
			return err
		}
		b.port = port
	}
	port := b.port
	b.host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	quote := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	userlist := quote(server.User) + " " + quote(server.Password) + "\n"
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%d
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
logfile = %s
`, server.Host, server.Port, port, filepath.Join(b.dir, "userlist.txt"), filepath.Join(b.dir, "pgbouncer.log"))
	for name, content := range map[string]string{"userlist.txt": userlist, "pgbouncer.ini": ini} {
		path := filepath.Join(b.dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return err
		}
		if cred != nil {
			if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
				return err
			}
		}
	}
	cmd := exec.Command(bin, filepath.Join(b.dir, "pgbouncer.ini"))
	cmd.Dir = b.dir
	cmd.Env = childEnv()
	// Its own process group, so that a terminal's ^C does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting pgbouncer: %w", err)
	}
	b.cmd, b.exited = cmd, make(chan error, 1)
	go func() { b.exited <- cmd.Wait() }()
	if err := b.startWatchdog(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), bouncerStartTimeout)
	defer cancel()
	u := (&url.URL{Scheme: "postgres", User: url.User(server.User), Host: b.host, Path: "/" + server.Database, RawQuery: "sslmode=disable"}).String()
	for {
		conn, err := pgx.Connect(ctx, u)
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case err := <-b.exited:
			b.exited <- err
			return fmt.Errorf("pgbouncer exited: %v; log: %s", err, b.logTail())
		case <-ctx.Done():
			return fmt.Errorf("pgbouncer did not answer within %v: %v; log: %s", bouncerStartTimeout, err, b.logTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startWatchdog starts a shell that blocks reading its stdin and, at EOF
// (this process exited), kills PgBouncer and removes its directory.
func (b *bouncer) startWatchdog() error {
	const script = `read -r _; kill -9 "$0"; rm -rf "$1"`
	cmd := exec.Command("/bin/sh", "-c", script, strconv.Itoa(b.cmd.Process.Pid), b.dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting pgbouncer watchdog: %w", err)
	}
	b.watchdog, b.watchdogIn = cmd, in
	return nil
}

// stop kills PgBouncer and removes its directory.
func (b *bouncer) stop() error {
	return errors.Join(b.stopProcesses(), os.RemoveAll(b.dir))
}

// stopProcesses kills PgBouncer and its watchdog.
func (b *bouncer) stopProcesses() error {
	var errs []error
	if b.watchdog != nil {
		if err := b.watchdog.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, err)
		}
		_ = b.watchdog.Wait() // reports the kill
		b.watchdogIn.Close()
		b.watchdog = nil
	}
	if b.cmd != nil {
		if err := b.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, err)
		}
		<-b.exited
		b.cmd = nil
	}
	return errors.Join(errs...)
}

func (b *bouncer) logTail() string {
	data, err := os.ReadFile(filepath.Join(b.dir, "pgbouncer.log"))
	if err != nil {
		return err.Error()
	}
	const max = 2000
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return strings.TrimSpace(string(data))
}

// freePort returns a loopback TCP port nothing listens on now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// stopBouncer stops the shared PgBouncer, if one was started.
func stopBouncer() error {
	if sharedBouncer == nil {
		return nil
	}
	b := sharedBouncer
	sharedBouncer = nil
	return b.stop()
}
