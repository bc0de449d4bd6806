package cli

import (
	"context"
	"encoding/base64"
	"fmt"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/ref"
)

// refCommand groups the ref commands: set, get, ls, rm.
func refCommand(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ref",
		Short: "Name blobs with refs, which keep them from garbage collection",
		Long: `A ref is a named, versioned pointer to a blob: while it is live (no
expiry, or an expiry still ahead) no sweep removes the blob. A weak ref
(ref set --weak) names a blob without keeping it, and goes with it. Names
are slash-separated, such as tags/app/v1.`,
		Args: exactArgs(0),
	}
	cmd.AddCommand(refSetCommand(e), refGetCommand(e), refListCommand(e), refRemoveCommand(e))
	return cmd
}

func refSetCommand(e *env) *cobra.Command {
	var ttl time.Duration
	var ifAbsent bool
	var ifVersion int64
	var annotation string
	var weak bool
	cmd := &cobra.Command{
		Use:   "set NAME KEY",
		Short: "Point the ref NAME at the stored blob KEY and print its version",
		Args:  exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			key, err := parseKey(args[1])
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("ttl") {
				if ttl == 0 {
					return usageError("--ttl 0s: leave --ttl out for a ref that never expires")
				}
				if err := checkTTLFlag(ttl); err != nil {
					return err
				}
			}
			opts := ref.SetOptions{TTL: ttl, IfAbsent: ifAbsent, IfVersion: ifVersion, Weak: weak}
			if annotation != "" {
				opts.Annotation = []byte(annotation)
			}
			return e.withStore(cmd.Context(), func(st *stead.Store) error {
				r, err := st.Refs.Set(cmd.Context(), args[0], key, opts)
				if err != nil {
					return err
				}
				return printRef(e, r)
			})
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "expire the ref this long after the set, at least 1µs (default: never)")
	cmd.Flags().BoolVar(&ifAbsent, "if-absent", false, "create only: fail if a live ref has the name")
	cmd.Flags().Int64Var(&ifVersion, "if-version", 0, "swap only from this version")
	cmd.Flags().StringVar(&annotation, "annotation", "", "a short text to attach to the ref")
	cmd.Flags().BoolVar(&weak, "weak", false, "name the blob without keeping it: a sweep may collect it, and the ref goes with it")
	return cmd
}

func refGetCommand(e *env) *cobra.Command {
	var touch time.Duration
	cmd := &cobra.Command{
		Use:   "get NAME",
		Short: "Print a ref: its key, version, expiry and annotation",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if touch < 0 {
				return fmt.Errorf("--touch %v: %w: want a positive duration, or none", touch, stead.ErrInvalidArgument)
			}
			return e.withStore(cmd.Context(), func(st *stead.Store) error {
				var r ref.Ref
				var err error
				if touch > 0 {
					r, err = st.Refs.GetTouch(cmd.Context(), args[0], touch)
				} else {
					r, err = st.Refs.Get(cmd.Context(), args[0])
				}
				if err != nil {
					return err
				}
				return printRef(e, r)
			})
		},
	}
	cmd.Flags().DurationVar(&touch, "touch", 0, "renew an expiring ref to expire this long from now, when less than half of it is left")
	return cmd
}

func refListCommand(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls [PREFIX]",
		Short: "List the live refs (whose names start with PREFIX) in name order",
		Args:  rangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			return e.withStore(cmd.Context(), func(st *stead.Store) error {
				return listRefs(cmd.Context(), e, st, prefix, asJSON)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object a line")
	return cmd
}

func listRefs(ctx context.Context, e *env, st *stead.Store, prefix string, asJSON bool) error {
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if !asJSON {
		fmt.Fprintln(w, "NAME\tKEY\tVERSION\tEXPIRES\tWEAK")
	}
	for r, err := range st.Refs.All(ctx, prefix) {
		if err != nil {
			return err
		}
		if asJSON {
			if err := writeJSON(e, refJSON(r)); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", r.Name, r.Key, r.Version, expiryText(r.Expiry), yesNo(r.Weak))
	}
	return w.Flush()
}

func refRemoveCommand(e *env) *cobra.Command {
	var ifVersion int64
	cmd := &cobra.Command{
		Use:   "rm NAME...",
		Short: "Delete refs; the blobs they named are left to garbage collection",
		Args:  minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, name := range args {
				// Every name is checked before anything is deleted.
				if err := ref.CheckName(name); err != nil {
					return fmt.Errorf("ref rm %.80q: %w", name, err)
				}
			}
			return e.withStore(cmd.Context(), func(st *stead.Store) error {
				for _, name := range args {
					if err := st.Refs.Delete(cmd.Context(), name, ifVersion); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().Int64Var(&ifVersion, "if-version", 0, "delete only this version")
	return cmd
}

func refJSON(r ref.Ref) map[string]any {
	out := map[string]any{"name": r.Name, "key": r.Key.String(), "version": r.Version}
	if !r.Expiry.IsZero() {
		out["expiry"] = r.Expiry.UTC().Format(time.RFC3339Nano)
	}
	if r.Weak {
		out["weak"] = true
	}
	// An annotation is text when it is UTF-8, else base64 under its own
	// name: JSON would turn other bytes into U+FFFD.
	switch {
	case len(r.Annotation) == 0:
	case utf8.Valid(r.Annotation):
		out["annotation"] = string(r.Annotation)
	default:
		out["annotation_base64"] = base64.StdEncoding.EncodeToString(r.Annotation)
	}
	return out
}

func printRef(e *env, r ref.Ref) error {
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "name\t%s\nkey\t%s\nversion\t%d\nexpires\t%s\n", r.Name, r.Key, r.Version, expiryText(r.Expiry))
	if r.Weak {
		fmt.Fprintf(w, "weak\tyes: keeps nothing\n")
	}
	if len(r.Annotation) > 0 {
		fmt.Fprintf(w, "annotation\t%q\n", r.Annotation)
	}
	return w.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func expiryText(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return t.UTC().Format(time.RFC3339Nano)
}
