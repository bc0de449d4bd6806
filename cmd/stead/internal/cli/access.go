package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/steadkit/stead/server/access"
)

// accessFlags are serve's flags of users and access
// (docs/guides/registry.md, "Users and access").
type accessFlags struct {
	htpasswd, access, tokenKey, publicURL, trustedProxies string
}

func (f *accessFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.htpasswd, "htpasswd", "", "htpasswd file of users (bcrypt: htpasswd -B, or stead user add); read again when it changes or on SIGHUP")
	fs.StringVar(&f.access, "access", "", "access file: who may pull, push, delete and use /v1, /cache, /metrics (default: every identity may do everything)")
	fs.StringVar(&f.tokenKey, "token-key", "", "file of at least 32 bytes signing the registry's login tokens; servers behind one address share it (default: a key of this process)")
	fs.StringVar(&f.publicURL, "public-url", "", "scheme and host clients reach the server at, for the token endpoint's address (default: the request's Host)")
	fs.StringVar(&f.trustedProxies, "trusted-proxy", "", "comma-separated CIDRs or addresses of reverse proxies whose X-Forwarded-For names the client for the failed-login limit (default: none, the limit is per peer address)")
}

// authority builds the server's access.Authority, and reloads its files
// on SIGHUP until ctx ends or stop is called.
func (f *accessFlags) authority(ctx context.Context, token string, log *slog.Logger) (a *access.Authority, stop func(), err error) {
	cfg := access.Config{Token: token, Htpasswd: f.htpasswd, Access: f.access, PublicURL: f.publicURL, Logger: log}
	for s := range strings.SplitSeq(f.trustedProxies, ",") {
		if s = strings.TrimSpace(s); s == "" && f.trustedProxies == "" {
			break
		}
		p, err := netip.ParsePrefix(s)
		if ip, ipErr := netip.ParseAddr(s); ipErr == nil {
			p, err = ip.Prefix(ip.BitLen()) // one address
		}
		if err != nil {
			return nil, nil, usageError("--trusted-proxy %q: want a CIDR such as 10.0.0.0/8 or fd00::/8", s)
		}
		cfg.TrustedProxies = append(cfg.TrustedProxies, p.Masked())
	}
	if f.tokenKey != "" {
		b, err := os.ReadFile(f.tokenKey)
		if err != nil {
			return nil, nil, usageError("token key: %v", err)
		}
		cfg.TokenKey = []byte(strings.TrimSpace(string(b)))
	}
	a, err = access.New(cfg)
	if err != nil {
		return nil, nil, usageError("%v", err)
	}
	ctx, stop = context.WithCancel(ctx)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := a.Reload(); err != nil {
					log.Error("serve: reload of users and access", "err", err)
				} else {
					log.Info("serve: users and access reloaded")
				}
			}
		}
	}()
	return a, stop, nil
}

func userCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "user",
		Short: "Manage the users of an htpasswd file",
		Args:  cobra.NoArgs,
	}
	var file string
	add := &cobra.Command{
		Use:   "add NAME",
		Short: "Add a user, or set its password, in an htpasswd file",
		Long: `Read a password (from the terminal without echo, else the first line of
stdin) and write the user's htpasswd line, a bcrypt hash as htpasswd -B
makes it, at the cost most of the file's hashes have (10 for a new file or
stdout): to stdout, or into --htpasswd FILE, replacing the user's line if
there is one. A server reads the file again when it changes.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pass, err := readPassword(e)
			if err != nil {
				return err
			}
			var old []byte
			if file != "" {
				if old, err = os.ReadFile(file); err != nil && !errors.Is(err, os.ErrNotExist) {
					return err
				}
			}
			line, err := access.HashPassword(args[0], pass, access.HashCost(old))
			if err != nil {
				return usageError("%v", err)
			}
			if file == "" {
				_, err := fmt.Fprintln(e.stdout, line)
				return err
			}
			return setUser(file, old, args[0], line)
		},
	}
	add.Flags().StringVar(&file, "htpasswd", "", "htpasswd file to add the user to (created if missing; default: print the line)")
	cmd.AddCommand(add)
	return cmd
}

// readPassword reads a password from the terminal, or stdin's first line.
func readPassword(e *env) (string, error) {
	if f, ok := e.stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(e.stderr, "password: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(e.stderr)
		if err != nil {
			return "", err
		}
		return string(b), checkPassword(string(b))
	}
	line, err := bufio.NewReader(e.stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	return line, checkPassword(line)
}

func checkPassword(p string) error {
	if p == "" {
		return usageError("empty password")
	}
	return nil
}

// setUser writes line for name into the htpasswd file of content old,
// replacing name's line, through a file renamed into place that keeps an
// existing file's mode and, where the system lets it, its owner and group;
// a new file is 0600.
func setUser(file string, old []byte, name, line string) error {
	mode := os.FileMode(0o600)
	existing, err := os.Stat(file)
	if err == nil {
		mode = existing.Mode().Perm()
	}
	var out []string
	for _, l := range strings.Split(string(old), "\n") {
		if l != "" && !strings.HasPrefix(l, name+":") {
			out = append(out, l)
		}
	}
	out = append(out, line)
	tmp, err := os.CreateTemp(filepath.Dir(file), ".htpasswd-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(strings.Join(out, "\n") + "\n"); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if existing != nil {
		keepOwner(tmp, existing)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), file)
}
