package cli

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine/remote/wire"
	"github.com/steadkit/stead/record"
)

func recordsCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "records",
		Short: "Inspect and claim records (ls, leased, show, claim)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError("want a subcommand: ls, leased, show or claim (see stead records --help)")
		},
	}
	var asJSON bool
	var limit int
	ls := &cobra.Command{
		Use:   "ls GROUP",
		Short: "List a group's claimable records, in id order (exit 3: no such group)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withStore(cmd.Context(), func(st *stead.Store) error {
				recs, err := st.Records.ListClaimable(cmd.Context(), args[0], time.Time{}, limit)
				if err != nil {
					return err
				}
				if len(recs) == 0 {
					if err := knownGroup(cmd.Context(), st, args[0]); err != nil {
						return err
					}
				}
				if asJSON {
					return writeJSON(e, wire.Records{Records: wire.FromRecords(recs)})
				}
				printRecords(e.stdout, recs)
				return nil
			})
		},
	}
	ls.Flags().IntVar(&limit, "limit", 100, "list at most this many")
	ls.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	var after string
	var leasedLimit int
	leased := &cobra.Command{
		Use:   "leased GROUP [--after ID] [--limit 100] [--json]",
		Short: "List a group's records leased now (being worked on), in id order (exit 3: no such group)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withStore(cmd.Context(), func(st *stead.Store) error {
				recs, err := st.Records.ListLeased(cmd.Context(), args[0], after, time.Time{}, leasedLimit)
				if err != nil {
					return err
				}
				if len(recs) == 0 {
					if err := knownGroup(cmd.Context(), st, args[0]); err != nil {
						return err
					}
				}
				if asJSON {
					page := wire.RecordPage{Records: wire.FromRecords(recs)}
					if len(recs) == leasedLimit {
						page.Next = recs[len(recs)-1].ID
					}
					return writeJSON(e, page)
				}
				printRecords(e.stdout, recs)
				return nil
			})
		},
	}
	leased.Flags().StringVar(&after, "after", "", "list the ids after this one")
	leased.Flags().IntVar(&leasedLimit, "limit", 100, fmt.Sprintf("list at most this many (1 to %d)", record.MaxListLeased))
	leased.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	var payload bool
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Print one record (--payload: its payload alone, raw)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withStore(cmd.Context(), func(st *stead.Store) error {
				rec, err := st.Records.Load(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				switch {
				case payload:
					_, err = e.stdout.Write(rec.Payload)
					return err
				case asJSON:
					return writeJSON(e, wire.FromRecord(rec))
				}
				printRecord(e.stdout, rec)
				return nil
			})
		},
	}
	show.Flags().BoolVar(&payload, "payload", false, "write the payload alone, raw")
	show.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	var (
		group, owner string
		ttl          time.Duration
	)
	claim := &cobra.Command{
		Use:   "claim ID --group GROUP [--owner OWNER] [--ttl 5m]",
		Short: "Take the lease on a record, as an operator would to park or fix it",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if group == "" {
				return usageError("--group is required")
			}
			if err := checkTTLFlag(ttl); err != nil {
				return err
			}
			return e.withStore(cmd.Context(), func(st *stead.Store) error {
				rec, err := st.Records.Claim(cmd.Context(), group, args[0], ownerOf(cmd, owner), ttl)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(e, wire.FromRecord(rec))
				}
				printRecord(e.stdout, rec)
				return nil
			})
		},
	}
	claim.Flags().StringVar(&group, "group", "", "the record's group")
	claim.Flags().StringVar(&owner, "owner", "", "the lease's owner (default HOST:PID, this process)")
	claim.Flags().DurationVar(&ttl, "ttl", 5*time.Minute, "the lease's length")
	claim.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	cmd.AddCommand(ls, leased, show, claim)
	return cmd
}

// knownGroup returns an error wrapping stead.ErrUnknownGroup when group
// is not registered: a group never registered lists as empty, and the
// commands say so.
func knownGroup(ctx context.Context, st *stead.Store, group string) error {
	known, err := st.Records.GroupExists(ctx, group)
	if err == nil && !known {
		err = fmt.Errorf("group %q: %w", group, stead.ErrUnknownGroup)
	}
	return err
}

func printRecords(w io.Writer, recs []record.Record) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tVERSION\tTENANT\tLEASE\tUPDATED")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, r.Status, r.Version, orDash(r.Tenant), leaseText(r.Lease), r.UpdatedAt.UTC().Format(time.RFC3339))
	}
	tw.Flush()
}

func printRecord(w io.Writer, r record.Record) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, kv := range [][2]string{
		{"id", r.ID}, {"group", r.Group}, {"tenant", orDash(r.Tenant)}, {"status", string(r.Status)},
		{"version", fmt.Sprint(r.Version)}, {"lease", leaseText(r.Lease)}, {"incarnation", fmt.Sprint(r.Lease.Incarnation)},
		{"updated", r.UpdatedAt.UTC().Format(time.RFC3339Nano)}, {"payload", fmt.Sprintf("%d bytes", len(r.Payload))},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
	}
	tw.Flush()
}

// leaseText says who holds l and until when, or since when it has lapsed
// (at the real clock, as the store judges it without a clock of its own).
func leaseText(l record.Lease) string {
	if l.Owner == "" {
		return "-"
	}
	state := "until"
	if !l.Expiry.After(time.Now()) {
		state = "lapsed"
	}
	return fmt.Sprintf("%s %s %s", l.Owner, state, l.Expiry.UTC().Format(time.RFC3339))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
