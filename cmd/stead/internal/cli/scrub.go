package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
)

// scrubPage is how many keys scrub lists at a time: its memory is bounded
// by one page and one chunk, whatever the store holds.
const scrubPage = 256

// scrubCommand re-hashes every stored blob and lists the corrupt ones.
func scrubCommand(e *env) *cobra.Command {
	var fromText string
	cmd := &cobra.Command{
		Use:   "scrub [--from KEY]",
		Short: "Re-hash every stored blob and list the corrupt ones",
		Long: `Re-hashes every stored blob, in key order, streaming, and prints the key of
each one whose content no longer matches it or whose bucket object is
missing, and why on stderr (beside the key when stdout is a terminal).
Exits 5 when it found any, 1 on another error (saying which key to resume
from), 0 when every blob is intact. On a terminal it shows a progress bar.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return scrub(cmd.Context(), e, fromText)
		},
	}
	cmd.Flags().StringVar(&fromText, "from", "", "start at this key (a resumed scrub), not at the first")
	return cmd
}

func scrub(ctx context.Context, e *env, fromText string) error {
	var from blob.Key
	if fromText != "" {
		var err error
		if from, err = blob.ParseKey(fromText); err != nil {
			return usageError("--from: %v", err)
		}
	}
	st, err := e.open(ctx, stead.WithVerifyReads())
	if err != nil {
		return err
	}
	defer st.Close()

	total, err := scrubTotal(ctx, st, from)
	if err != nil {
		return err
	}
	bar := e.bytesBar("scrub", total)
	defer bar.done()
	progress := bar.writer()

	var checked, corrupt int
	var read int64
	err = scrubKeys(ctx, st, from, func(info blob.Info) error {
		key := info.Key
		n, err := scrubOne(ctx, st, key, progress)
		read += n
		switch {
		case errors.Is(err, stead.ErrDigestMismatch):
			corrupt++
			bar.clear()
			// The key alone on stdout, for a script; why on stderr, or
			// beside the key when a person reads stdout.
			if e.stdoutTTY {
				fmt.Fprintf(e.stdout, "%s: %v\n", key, err)
			} else {
				fmt.Fprintln(e.stdout, key)
				fmt.Fprintf(e.stderr, "%s: %v\n", key, err)
			}
		case errors.Is(err, stead.ErrNotFound):
			return nil // deleted since it was listed
		case err != nil:
			return fmt.Errorf("%w (resume with: stead scrub --from %s)", err, key)
		}
		checked++
		return nil
	})
	bar.done()
	fmt.Fprintf(e.stderr, "scrubbed %d blobs, %d bytes: %d corrupt\n", checked, read, corrupt)
	switch {
	case err != nil:
		return err
	case corrupt > 0:
		return &exitError{code: exitCorrupt}
	}
	return nil
}

// scrubKeys calls fn for from, if stored, then every key after it, a page
// at a time: each page is its own statement, so fn's reads never wait on a
// listing that holds a connection.
func scrubKeys(ctx context.Context, st *stead.Store, from blob.Key, fn func(blob.Info) error) error {
	after := from
	if !from.IsZero() {
		info, err := st.Blobs.Stat(ctx, from)
		switch {
		case err == nil:
			if err := fn(info); err != nil {
				return err
			}
		case !errors.Is(err, stead.ErrNotFound):
			return err
		}
	}
	for {
		page, err := st.Blobs.List(ctx, after, scrubPage)
		if err != nil {
			return err
		}
		if len(page) == 0 {
			return nil
		}
		for _, info := range page {
			if err := fn(info); err != nil {
				return err
			}
		}
		after = page[len(page)-1].Key
	}
}

// scrubTotal sums the sizes of the blobs a scrub from from will read.
func scrubTotal(ctx context.Context, st *stead.Store, from blob.Key) (int64, error) {
	var total int64
	err := scrubKeys(ctx, st, from, func(info blob.Info) error {
		total += info.Size
		return nil
	})
	return total, err
}

// scrubOne streams key's value through the store's verification into
// progress and returns how many bytes it read; a corrupt value is an error
// wrapping ErrDigestMismatch.
func scrubOne(ctx context.Context, st *stead.Store, key blob.Key, progress io.Writer) (int64, error) {
	rd, err := st.Blobs.Get(ctx, key)
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	return rd.WriteTo(progress)
}
