package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// serveSettings parses args as stead serve's and applies the settings, with
// vars as the environment; it returns the command, for its flags.
func serveSettings(t *testing.T, vars map[string]string, args ...string) (*cobra.Command, error) {
	t.Helper()
	root := newRoot(&env{stdout: io.Discard, stderr: io.Discard})
	cmd, _, err := root.Find([]string{"serve"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	return cmd, applySettings(cmd, func(name string) string { return vars[name] })
}

func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stead.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// other returns a value for f unlike its default, as the flag prints it.
func other(t *testing.T, f *pflag.Flag) string {
	switch f.Value.Type() {
	case "string":
		return "other-" + f.Name
	case "bool":
		b, _ := strconv.ParseBool(f.DefValue)
		return strconv.FormatBool(!b)
	case "int", "int64":
		n, _ := strconv.ParseInt(f.DefValue, 10, 64)
		return strconv.FormatInt(n+7, 10)
	case "duration":
		d, _ := time.ParseDuration(f.DefValue)
		return (d + 3*time.Second).String()
	}
	t.Fatalf("flag --%s of type %s: no other value to test with", f.Name, f.Value.Type())
	return ""
}

// TestConfigRoundTrip writes every setting of stead serve, each unlike its
// default, to a config file, and reads each back.
func TestConfigRoundTrip(t *testing.T) {
	t.Parallel()
	cmd, _ := serveSettings(t, nil)
	want := map[string]string{}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if isSetting(f) {
			want[f.Name] = other(t, f)
		}
	})
	for _, name := range []string{"db", "log-level", "addr", "token-file", "max-conns", "registry", "body-grace", "build-cache-ttl"} {
		if _, ok := want[name]; !ok {
			t.Errorf("--%s is no setting of stead serve", name)
		}
	}
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	var text strings.Builder
	text.WriteString("# every setting\n")
	for _, name := range names {
		fmt.Fprintf(&text, "%s: %q\n", name, want[name])
	}
	cmd, err := serveSettings(t, nil, "--config", writeConfig(t, text.String()))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if got := cmd.Flags().Lookup(name).Value.String(); got != want[name] {
			t.Errorf("--%s read from the config file = %q, want %q", name, got, want[name])
		}
	}
}

// TestConfigPrecedence: a flag overrides the environment, which overrides
// the config file, which overrides the default.
func TestConfigPrecedence(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "max-conns: 100\ndb: sqlite://./from-file.db\n")
	env := map[string]string{"STEAD_MAX_CONNS": "200", "STEAD_DB": "sqlite://./from-env.db"}
	for _, tc := range []struct {
		env       map[string]string
		args      []string
		conns, db string
	}{
		{env, []string{"--config", path, "--max-conns", "300", "--db", "mem://"}, "300", "mem://"},
		{env, []string{"--config", path}, "200", "sqlite://./from-env.db"},
		{nil, []string{"--config", path}, "100", "sqlite://./from-file.db"},
		{nil, nil, "1024", ""},
	} {
		cmd, err := serveSettings(t, tc.env, tc.args...)
		if err != nil {
			t.Fatal(err)
		}
		if conns, db := cmd.Flags().Lookup("max-conns").Value.String(), cmd.Flags().Lookup("db").Value.String(); conns != tc.conns || db != tc.db {
			t.Errorf("env %v, args %q: max-conns %s, db %q; want %s, %q", tc.env, tc.args, conns, db, tc.conns, tc.db)
		}
	}
}

// TestConfigRefused: a config file with a key that is no setting, a value
// that is not one, or a bad value is a usage error naming the line, and
// serve does not start.
func TestConfigRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ text, want string }{
		{"addr: 127.0.0.1:0\nnope: 1\n", `line 2: unknown setting "nope"`},
		{"allow-client-clock: true\n", `line 1: unknown setting "allow-client-clock"`},
		{"config: other.yaml\n", `line 1: unknown setting "config"`},
		{"max-conns: [1, 2]\n", "line 1: max-conns wants a single value"},
		{"max-conns:\n", "line 1: max-conns wants a single value"},
		{"max-conns: 1\nmax-conns: 2\n", "max-conns"},
		{"max-conns: many\n", "line 1: max-conns"},
		{"- addr\n", "want a mapping"},
		{"addr: [\n", "stead.yaml"},
	} {
		path := writeConfig(t, tc.text)
		code, stdout, stderr := runIn(t.Context(), "--db", "mem://", "serve", "--addr", "127.0.0.1:0", "--config", path)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("stead serve --config with %q = exit %d, stdout %q, stderr %q; want exit 2 saying %q", tc.text, code, stdout, stderr, tc.want)
		}
	}
	if code, _, stderr := runIn(t.Context(), "serve", "--config", filepath.Join(t.TempDir(), "none.yaml")); code != exitUsage || !strings.Contains(stderr, "none.yaml") {
		t.Errorf("stead serve --config of a missing file = exit %d, stderr %q; want exit 2 naming it", code, stderr)
	}
}

func TestServeTLSFlagsTogether(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--tls-cert", "cert.pem"}, {"--tls-key", "key.pem"}} {
		code, stdout, stderr := runIn(t.Context(), append([]string{"--db", "mem://", "serve", "--addr", "127.0.0.1:0"}, args...)...)
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, "--tls-cert and --tls-key go together") {
			t.Errorf("stead serve %s = exit %d, stdout %q, stderr %q; want exit 2", args, code, stdout, stderr)
		}
	}
}
