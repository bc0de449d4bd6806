package cli

import (
	"fmt"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

func versionCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the module version and VCS revision this binary was built from",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(e.stdout, buildVersion())
			return err
		},
	}
}

// buildVersion is versionText of this binary's build information.
func buildVersion() string {
	bi, _ := debug.ReadBuildInfo()
	return versionText(bi)
}

// versionText says what bi records of a build: the main module's version,
// the VCS revision (and whether the tree was modified) and commit time
// when the build stamped them, and the Go release.
func versionText(bi *debug.BuildInfo) string {
	if bi == nil {
		return "stead (unknown version: built without module support)\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "stead %s\n", bi.Main.Version)
	vcs := map[string]string{}
	for _, s := range bi.Settings {
		vcs[s.Key] = s.Value
	}
	if rev := vcs["vcs.revision"]; rev != "" {
		if vcs["vcs.modified"] == "true" {
			rev += " (modified)"
		}
		fmt.Fprintf(&b, "revision %s\n", rev)
	}
	if t := vcs["vcs.time"]; t != "" {
		fmt.Fprintf(&b, "committed %s\n", t)
	}
	fmt.Fprintf(&b, "built with %s\n", bi.GoVersion)
	return b.String()
}
