package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v4"
)

// applySettings sets each setting of cmd (its flags, the global ones
// included, but not help, --config or hidden flags) not given on the
// command line from the environment, STEAD_ and the flag's name in
// capitals with dashes as underscores (STEAD_MAX_CONNS), else from the
// YAML file --config names, a mapping of flag names to values: a flag
// overrides the environment, which overrides the file, which overrides
// the default. A key of the file that is no setting, or a value that is
// not a single scalar, is refused.
func applySettings(cmd *cobra.Command, getenv func(string) string) error {
	flags := cmd.Flags()
	path, err := flags.GetString("config")
	if err != nil {
		return err
	}
	file := map[string]setting{}
	if path != "" {
		if file, err = readSettings(path, flags); err != nil {
			return err
		}
	}
	flags.VisitAll(func(f *pflag.Flag) {
		if err != nil || !isSetting(f) || f.Changed {
			return
		}
		from, value := envName(f.Name), getenv(envName(f.Name))
		if value == "" {
			s, ok := file[f.Name]
			if !ok {
				return
			}
			from, value = fmt.Sprintf("%s line %d", path, s.line), s.value
		}
		if serr := f.Value.Set(value); serr != nil {
			err = usageError("%s: %s: %v", from, f.Name, serr)
		}
	})
	return err
}

// isSetting reports whether f may come from the environment or a config
// file.
func isSetting(f *pflag.Flag) bool { return !f.Hidden && f.Name != "help" && f.Name != "config" }

// envName is the environment variable of the setting name.
func envName(name string) string {
	return "STEAD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// setting is a value read from a config file, and its line.
type setting struct {
	value string
	line  int
}

// readSettings reads the YAML config file at path: a mapping whose keys
// are settings of flags.
func readSettings(path string, flags *pflag.FlagSet) (map[string]setting, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageError("--config: %v", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, usageError("config %s: %v", path, err)
	}
	out := map[string]setting{}
	if len(doc.Content) == 0 {
		return out, nil // an empty file, or comments alone
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return nil, usageError("config %s line %d: want a mapping of settings to values", path, m.Line)
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if f := flags.Lookup(k.Value); f == nil || !isSetting(f) {
			return nil, usageError("config %s line %d: unknown setting %q (the settings are the flags of stead %s --help)", path, k.Line, k.Value, flags.Name())
		}
		if _, dup := out[k.Value]; dup {
			return nil, usageError("config %s line %d: %s is set twice", path, k.Line, k.Value)
		}
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			return nil, usageError("config %s line %d: %s wants a single value", path, v.Line, k.Value)
		}
		out[k.Value] = setting{v.Value, k.Line}
	}
	return out, nil
}
