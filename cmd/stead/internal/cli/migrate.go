package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/steadkit/stead"
)

func migrateCommand(e *env) *cobra.Command {
	up := func(cmd *cobra.Command, _ []string) error { return migrateUp(cmd.Context(), e) }
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Bring the database schema up to date (also: status, up)",
		Long: `Bring the database schema to the newest version this binary knows;
"migrate" alone is "migrate up". A database newer than this binary is
refused: upgrade stead instead.`,
		Args: cobra.NoArgs,
		RunE: up,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "up",
		Short: "Bring the database schema up to date",
		Args:  cobra.NoArgs,
		RunE:  up,
	}, &cobra.Command{
		Use:   "status",
		Short: "Print the schema version and whether it is current",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.withStore(cmd.Context(), func(st *stead.Store) error {
				current, latest, err := st.SchemaVersion(cmd.Context())
				if err != nil {
					return err
				}
				state := "current"
				if current < latest {
					state = "behind: run stead migrate"
				}
				fmt.Fprintf(e.stdout, "schema version %d of %d: %s\n", current, latest, state)
				return nil
			}, stead.WithoutMigrate())
		},
	})
	return cmd
}

func migrateUp(ctx context.Context, e *env) error {
	return e.withStore(ctx, func(st *stead.Store) error {
		before, _, err := st.SchemaVersion(ctx)
		if err != nil {
			return err
		}
		if err := st.Migrate(ctx); err != nil {
			return err
		}
		after, _, err := st.SchemaVersion(ctx)
		if err != nil {
			return err
		}
		if before == after {
			fmt.Fprintf(e.stdout, "schema is current at version %d\n", after)
		} else {
			fmt.Fprintf(e.stdout, "migrated schema from version %d to %d\n", before, after)
		}
		return nil
	}, stead.WithoutMigrate())
}
