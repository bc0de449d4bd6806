package sqlite

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	gblob "gocloud.dev/blob"

	"github.com/steadkit/stead/steaderr"
)

const (
	// DefaultBusyTimeout is Config.BusyTimeout's default.
	DefaultBusyTimeout = 5 * time.Second
	// DefaultReadConns is Config.ReadConns's default.
	DefaultReadConns = 4

	scheme = "sqlite://"
)

// Config configures the engine.
type Config struct {
	// Path is the database file; its directory is created if missing. A
	// relative path is resolved against the working directory when Open
	// runs.
	Path string
	// Synchronous is SQLite's synchronous setting: "NORMAL" or "FULL", in
	// any case. Defaults to "NORMAL": with WAL a commit survives a process
	// crash, but a power loss may lose the last commits; "FULL" syncs every
	// commit to disk.
	Synchronous string
	// BusyTimeout is how long a connection waits on a lock held by another
	// before failing. Defaults to DefaultBusyTimeout (5s).
	BusyTimeout time.Duration
	// ReadConns is the size of the reader pool: at most this many reads run
	// at once. Defaults to DefaultReadConns (4).
	ReadConns int
	// Bytes is the URL of a bucket (gocloud.dev/blob: file:///dir, s3://,
	// gs://, azblob:// where the binary registers them) that keeps the
	// values over the inline limit: the bytes tier
	// (docs/decisions/0027-bytes-tier.md). Bucket, when set, is such a
	// bucket already open (the caller closes it); it wins over Bytes.
	// Defaults to none: every byte in the database.
	Bytes  string
	Bucket *gblob.Bucket
	// BytesAdopt lets a bytes tier be given to a store that holds blobs
	// and recorded none (its existing values stay where they are).
	BytesAdopt bool
}

// withDefaults validates c and fills in its defaults. Errors wrap
// steaderr.ErrInvalidArgument.
func (c Config) withDefaults() (Config, error) {
	if c.Path == "" {
		return c, fmt.Errorf("%w: empty database path", steaderr.ErrInvalidArgument)
	}
	if strings.IndexByte(c.Path, 0) >= 0 {
		return c, fmt.Errorf("%w: database path %q holds a NUL byte", steaderr.ErrInvalidArgument, c.Path)
	}
	switch s := strings.ToUpper(c.Synchronous); s {
	case "":
		c.Synchronous = "NORMAL"
	case "NORMAL", "FULL":
		c.Synchronous = s
	default:
		return c, fmt.Errorf("%w: synchronous %q: want NORMAL or FULL", steaderr.ErrInvalidArgument, c.Synchronous)
	}
	switch {
	case c.BusyTimeout == 0:
		c.BusyTimeout = DefaultBusyTimeout
	case c.BusyTimeout < 0 || c.BusyTimeout > math.MaxInt32*time.Millisecond:
		return c, fmt.Errorf("%w: busy timeout %v: want a positive duration up to %v", steaderr.ErrInvalidArgument, c.BusyTimeout, math.MaxInt32*time.Millisecond)
	}
	switch {
	case c.ReadConns == 0:
		c.ReadConns = DefaultReadConns
	case c.ReadConns < 0:
		return c, fmt.Errorf("%w: read conns %d: want > 0", steaderr.ErrInvalidArgument, c.ReadConns)
	}
	return c, nil
}

// ParseURL parses "sqlite://PATH[?synchronous=normal|full&busy_timeout=5s&read_conns=4&bytes=URL&bytes_adopt=1]",
// bytes being a percent-encoded bucket URL (Config.Bytes).
// PATH may be relative ("sqlite://./data/s.db", "sqlite://data/s.db") or
// absolute ("sqlite:///var/lib/s.db") and is percent-decoded. Parameter
// names and values are case-insensitive. An empty path, an unknown or
// repeated parameter, or a bad value is an error wrapping
// steaderr.ErrInvalidArgument.
func ParseURL(rawURL string) (Config, error) {
	rest, ok := strings.CutPrefix(rawURL, scheme)
	if !ok {
		return Config{}, fmt.Errorf("%w: not a %s URL", steaderr.ErrInvalidArgument, scheme)
	}
	rawPath, rawQuery, _ := strings.Cut(rest, "?")
	shown := scheme + rawPath // errors leave the query out: it is not echoed
	path, err := url.PathUnescape(rawPath)
	if err != nil {
		return Config{}, fmt.Errorf("%w: %.100q: path: %w", steaderr.ErrInvalidArgument, shown, err)
	}
	cfg := Config{Path: path}
	if path == "" {
		return Config{}, fmt.Errorf("%w: %.100q: empty database path", steaderr.ErrInvalidArgument, shown)
	}
	query, err := url.ParseQuery(rawQuery)
	if err != nil {
		return Config{}, fmt.Errorf("%w: %.100q: query: %w", steaderr.ErrInvalidArgument, shown, err)
	}
	seen := make(map[string]bool, len(query))
	for name, values := range query {
		key := strings.ToLower(name)
		if seen[key] || len(values) != 1 {
			return Config{}, fmt.Errorf("%w: %.100q: parameter %q given more than once", steaderr.ErrInvalidArgument, shown, name)
		}
		seen[key] = true
		if err := cfg.setParam(key, values[0]); err != nil {
			return Config{}, fmt.Errorf("%w: %.100q: %w", steaderr.ErrInvalidArgument, shown, err)
		}
	}
	if _, err := cfg.withDefaults(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// setParam applies one URL parameter; key is lower case.
func (c *Config) setParam(key, value string) error {
	switch key {
	case "synchronous":
		switch v := strings.ToUpper(value); v {
		case "NORMAL", "FULL":
			c.Synchronous = v
			return nil
		}
		return fmt.Errorf("synchronous=%q: want normal or full", value)
	case "busy_timeout":
		d, err := time.ParseDuration(strings.ToLower(value))
		if err != nil || d <= 0 {
			return fmt.Errorf("busy_timeout=%q: want a positive duration such as 5s", value)
		}
		c.BusyTimeout = d
		return nil
	case "bytes":
		if value == "" {
			return fmt.Errorf("bytes=: want a bucket URL")
		}
		c.Bytes = value
		return nil
	case "bytes_adopt":
		switch value {
		case "1", "true":
			c.BytesAdopt = true
			return nil
		case "0", "false":
			return nil
		}
		return fmt.Errorf("bytes_adopt=%q: want 1 or 0", value)
	case "read_conns":
		n, err := strconv.Atoi(value)
		if err != nil || n <= 0 {
			return fmt.Errorf("read_conns=%q: want a positive integer", value)
		}
		c.ReadConns = n
		return nil
	}
	return fmt.Errorf("unknown parameter %q: want synchronous, busy_timeout, read_conns, bytes or bytes_adopt", key)
}
