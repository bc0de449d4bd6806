package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/steadkit/stead"
)

// usageCommand prints what the refs under a prefix hold.
func usageCommand(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "usage PREFIX",
		Short: "Say what the live refs under PREFIX hold: blobs, bytes, the dedup saving",
		Long: `Print what the live refs whose names start with PREFIX hold: a registry
repository (oci/team/app/_), a cache namespace (cache/), any ref prefix.
Content several refs name counts once; "referenced" counts it once per ref,
and the difference is what deduplication saved. It reads the refs a page
at a time and looks each distinct blob up once, at most 100000 refs. The
last push and pull are a registry repository's (a pull to half an hour).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withStore(cmd.Context(), func(st *stead.Store) error {
				u, err := st.Usage(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return json.NewEncoder(e.stdout).Encode(u)
				}
				w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintf(w, "prefix\t%s\n", u.Prefix)
				fmt.Fprintf(w, "refs\t%d\n", u.Refs)
				fmt.Fprintf(w, "blobs\t%d\n", u.Blobs)
				fmt.Fprintf(w, "bytes\t%d\n", u.Bytes)
				fmt.Fprintf(w, "referenced\t%d bytes\n", u.ReferencedBytes)
				fmt.Fprintf(w, "dedup saved\t%d bytes\n", u.DedupSavedBytes)
				for _, t := range []struct {
					name string
					at   time.Time
				}{{"last push", u.LastPush}, {"last pull", u.LastPull}} {
					if !t.at.IsZero() {
						fmt.Fprintf(w, "%s\t%s\n", t.name, t.at.Format(time.RFC3339))
					}
				}
				if u.Truncated {
					fmt.Fprintf(w, "truncated\tthe first %d refs only\n", stead.MaxUsageRefs)
				}
				return w.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the usage as one JSON object")
	return cmd
}
