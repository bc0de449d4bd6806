package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Environment variables that steer resolution.
const (
	// envURL names the server to use, skipping all probing.
	envURL = "STEAD_TEST_DATABASE_URL"
	// envMode set to "throwaway" skips envURL and the local probes and
	// starts a throwaway cluster.
	envMode = "STEAD_TEST_PG"
	// envRequire set to "1" turns a skip for want of PostgreSQL into a
	// failure.
	envRequire = "STEAD_REQUIRE_POSTGRES"
)

// probeTimeout bounds one connection attempt to a local server, so that a
// missing server is noticed fast.
const probeTimeout = 2 * time.Second

// urlTimeout bounds the connection check of STEAD_TEST_DATABASE_URL, which
// may name a remote server.
const urlTimeout = 10 * time.Second

// resolution is where this process's tests get PostgreSQL.
type resolution struct {
	// url is the server's URL, without a schema parameter; empty when err
	// is set.
	url string
	// cluster is the throwaway cluster url points at, if one was started.
	cluster *cluster
	// err says why no server could be had, as one line.
	err error
	// fatal marks err as a misconfiguration (a broken STEAD_TEST_DATABASE_URL,
	// a throwaway cluster that was demanded but could not start) rather
	// than an absent server: tests fail on it instead of skipping.
	fatal bool
}

var (
	sharedOnce sync.Once
	shared     resolution

	// startedMu guards started, the throwaway cluster Main must stop.
	startedMu sync.Mutex
	started   *cluster
)

// sharedResolution resolves once per process.
func sharedResolution() resolution {
	sharedOnce.Do(func() {
		shared = resolve(context.Background(), os.Getenv, startCluster)
		if shared.cluster != nil {
			startedMu.Lock()
			started = shared.cluster
			startedMu.Unlock()
		}
	})
	return shared
}

// stopShared stops the throwaway cluster, if one was started.
func stopShared() error {
	startedMu.Lock()
	c := started
	started = nil
	startedMu.Unlock()
	if c == nil {
		return nil
	}
	return c.stop()
}

// resolve finds a PostgreSQL: STEAD_TEST_DATABASE_URL, else a local server,
// else a throwaway cluster from start. getenv and start are parameters so
// tests can drive every branch.
func resolve(ctx context.Context, getenv func(string) string, start func(context.Context) (*cluster, error)) resolution {
	switch mode := getenv(envMode); mode {
	case "":
	case "throwaway":
		c, err := start(ctx)
		if err != nil {
			return failed(true, fmt.Errorf("pgtest: %s=throwaway, but no throwaway cluster could be started: %w", envMode, err))
		}
		return resolution{url: c.url, cluster: c}
	default:
		return failed(true, fmt.Errorf("pgtest: %s=%q: the only value is %q", envMode, mode, "throwaway"))
	}

	if raw := getenv(envURL); raw != "" {
		u, err := checkURL(ctx, raw)
		if err != nil {
			return failed(true, fmt.Errorf("pgtest: %s: %w", envURL, err))
		}
		return resolution{url: u}
	}

	tried := []string{envURL}
	reasons := []string{envURL + " unset"}
	u, localTried, localReasons := probeLocal(ctx, getenv)
	if u != "" {
		return resolution{url: u}
	}
	tried = append(tried, localTried...)
	reasons = append(reasons, localReasons...)

	c, err := start(ctx)
	if err == nil {
		return resolution{url: c.url, cluster: c}
	}
	tried = append(tried, "installed binaries")
	reasons = append(reasons, "throwaway cluster: "+err.Error())
	return failed(false, fmt.Errorf("pgtest: no PostgreSQL (tried %s): %s",
		strings.Join(tried, ", "), strings.Join(reasons, "; ")))
}

// failed returns a resolution carrying err flattened to one line.
func failed(fatal bool, err error) resolution {
	return resolution{err: errors.New(strings.Join(strings.Fields(err.Error()), " ")), fatal: fatal}
}

// checkURL validates an explicitly configured URL, connects to it once, and
// returns it without any schema parameter.
func checkURL(ctx context.Context, raw string) (string, error) {
	if !strings.HasPrefix(raw, "postgres://") && !strings.HasPrefix(raw, "postgresql://") {
		return "", errors.New("not a postgres:// URL (keyword=value strings cannot take a schema parameter)")
	}
	u := removeQueryParam(raw, schemaParam)
	if err := ping(ctx, u, urlTimeout); err != nil {
		return "", fmt.Errorf("%s: %w", redact(u), err)
	}
	return u, nil
}

// probeLocal looks for a server the way libpq would find one: PGHOST (a
// comma-separated list of hosts or socket directories) and PGPORT, else
// 127.0.0.1 and the usual socket directories on port 5432; as PGUSER, else
// postgres, else the OS user; in PGDATABASE, else postgres, else a database
// named after the user. It returns the first URL that connects, or what it
// tried and why each failed.
func probeLocal(ctx context.Context, getenv func(string) string) (found string, tried, reasons []string) {
	hosts := []string{"127.0.0.1", "/var/run/postgresql", "/tmp"}
	if h := getenv("PGHOST"); h != "" {
		hosts = nonEmpty(strings.Split(h, ","))
	}
	ports := nonEmpty(strings.Split(getenv("PGPORT"), ","))
	sslmode := getenv("PGSSLMODE")
	if sslmode == "" {
		sslmode = "disable"
	}
	password := getenv("PGPASSWORD")

	type login struct{ user, db string }
	var logins []login
	users := []string{getenv("PGUSER")}
	if users[0] == "" {
		users = []string{"postgres"}
		if u, err := user.Current(); err == nil && u.Username != "postgres" {
			users = append(users, u.Username)
		}
	}
	for _, u := range users {
		if db := getenv("PGDATABASE"); db != "" {
			logins = append(logins, login{u, db})
			continue
		}
		logins = append(logins, login{u, "postgres"})
		if u != "postgres" {
			logins = append(logins, login{u, u})
		}
	}

	for i, host := range hosts {
		port := "5432"
		switch {
		case len(ports) == len(hosts):
			port = ports[i]
		case len(ports) > 0:
			port = ports[0]
		}
		socket := strings.HasPrefix(host, "/")
		label := net.JoinHostPort(host, port)
		if socket {
			label = "unix socket " + filepath.Join(host, ".s.PGSQL."+port)
		}
		tried = append(tried, label)
		if socket {
			if _, err := os.Stat(filepath.Join(host, ".s.PGSQL."+port)); err != nil {
				reasons = append(reasons, label+": no such socket")
				continue
			}
		}
		var errs []string
		for _, l := range logins {
			var u string
			if socket {
				u = socketURL(host, port, l.user, password, l.db, sslmode)
			} else {
				u = tcpURL(host, port, l.user, password, l.db, sslmode)
			}
			err := ping(ctx, u, probeTimeout)
			if err == nil {
				return u, nil, nil
			}
			errs = append(errs, err.Error()) // Names the user and database.
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) {
				break // Nothing answered; other logins cannot help.
			}
		}
		reasons = append(reasons, label+": "+strings.Join(errs, ", "))
	}
	return "", tried, reasons
}

func nonEmpty(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// ping connects to u and runs one round trip, all within timeout.
func ping(ctx context.Context, u string, timeout time.Duration) error {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		return err
	}
	cfg.ConnectTimeout = timeout
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.Ping(ctx)
}

// tcpURL is the URL of database db on host:port.
func tcpURL(host, port, user, password, db, sslmode string) string {
	return "postgres://" + userinfo(user, password) + "@" + net.JoinHostPort(host, port) +
		"/" + escape(db, "") + "?sslmode=" + escape(sslmode, "")
}

// socketURL is the URL of database db through the unix socket in dir.
func socketURL(dir, port, user, password, db, sslmode string) string {
	return "postgres://" + userinfo(user, password) + "@/" + escape(db, "") +
		"?host=" + escape(dir, "/") + "&port=" + escape(port, "") + "&sslmode=" + escape(sslmode, "")
}

func userinfo(user, password string) string {
	if password == "" {
		return escape(user, "")
	}
	return escape(user, "") + ":" + escape(password, "")
}

// escape percent-encodes every byte of s except RFC 3986's unreserved
// characters and those in keep. Spaces become %20, never "+", which libpq
// and pgx would read literally.
func escape(s, keep string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("-._~", c) >= 0 || strings.IndexByte(keep, c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// redact hides the password of a URL for messages.
func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return "(unparsable URL)"
}
