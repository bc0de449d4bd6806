package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
)

func parseKey(text string) (blob.Key, error) {
	key, err := blob.ParseKey(text)
	if err != nil {
		return blob.Key{}, usageError("%v", err)
	}
	return key, nil
}

// onKey returns a RunE that parses its one argument as a key and calls f
// with the store open.
func (e *env) onKey(f func(ctx context.Context, st *stead.Store, key blob.Key) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		key, err := parseKey(args[0])
		if err != nil {
			return err
		}
		return e.withStore(cmd.Context(), func(st *stead.Store) error { return f(cmd.Context(), st, key) })
	}
}

func putCommand(e *env) *cobra.Command {
	var asJSON, ifAbsent bool
	var refName string
	var children []string
	cmd := &cobra.Command{
		Use:   "put FILE|-",
		Short: "Store a file (or stdin) as a blob and print its key",
		Long: `Store a file (or stdin) as a blob and print its key. With --ref the blob
and its ref are stored in one commit, all or nothing, when the value is
within the inline limit and has no --child: a refused ref (--if-absent
over a live one) stores nothing. A larger value, or one with children,
is stored first and its ref set after, the put's pin keeping the blob
meanwhile; a refused ref then leaves the blob to garbage collection.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ifAbsent && refName == "" {
				return usageError("--if-absent: only with --ref")
			}
			if refName != "" {
				// A bad name is refused before anything is stored.
				if err := ref.CheckName(refName); err != nil {
					return fmt.Errorf("--ref: %w", err)
				}
			}
			var opts blob.PutOptions
			for _, c := range children {
				k, err := parseKey(c)
				if err != nil {
					return err
				}
				opts.Children = append(opts.Children, k)
			}
			in := e.stdin
			size := int64(-1)
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				if fi, err := f.Stat(); err == nil {
					size = fi.Size()
				}
				in = f
			}
			counted := &countingReader{r: in}
			return e.withStore(cmd.Context(), func(st *stead.Store) error {
				bar := e.bytesBar("put", size)
				key, created, err := putBlob(cmd.Context(), st, bar.reader(counted), opts, refName, ref.SetOptions{IfAbsent: ifAbsent})
				bar.done()
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(e, map[string]any{"key": key.String(), "size": counted.n, "created": created})
				}
				fmt.Fprintln(e.stdout, key)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print {\"key\", \"size\", \"created\"} as JSON (created: this put stored the blob)")
	cmd.Flags().StringVar(&refName, "ref", "", "point the ref NAME at the blob, which keeps it from garbage collection")
	cmd.Flags().BoolVar(&ifAbsent, "if-absent", false, "with --ref: create the ref only, failing if a live ref has the name")
	cmd.Flags().StringSliceVar(&children, "child", nil, "a stored blob the content references, kept while this blob is (repeat, or comma-separate)")
	return cmd
}

// putBlob stores r with opts and, when name is not empty, points the ref
// name at it with set. Without children that is ref.Store.Put: one commit
// for an inline value, else its put then its set. ref.Store.Put declares
// no children, so with them the blob is put and the ref set after, the
// put's pin protecting the key until the ref does.
func putBlob(ctx context.Context, st *stead.Store, r io.Reader, opts blob.PutOptions, name string, set ref.SetOptions) (blob.Key, bool, error) {
	if name != "" && len(opts.Children) == 0 {
		res, err := st.Refs.Put(ctx, r, ref.PutOptions{Refs: []ref.PutRef{{Name: name, SetOptions: set}}})
		return res.Key, res.Created, err
	}
	res, err := st.Blobs.PutWith(ctx, r, opts)
	if err != nil {
		return blob.Key{}, false, err
	}
	if name != "" {
		if _, err := st.Refs.Set(ctx, name, res.Key, set); err != nil {
			return blob.Key{}, false, err
		}
	}
	return res.Key, res.Created, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func getCommand(e *env) *cobra.Command {
	var out, refName string
	var touch time.Duration
	cmd := &cobra.Command{
		Use:   "get KEY|--ref NAME [--touch D] [-o FILE]",
		Short: "Write a blob's value to stdout or a file",
		Long: `Write a blob's value to stdout or a file: the blob KEY, or with --ref
the blob the live ref NAME points at, the ref and its blob read in one
call, so the value is the one the ref named when it was read. An absent
or expired ref, and a weak one whose blob was collected, is not found.
With --touch the read renews an expiring ref to expire D from now, when
less than half of D is left, as ref get --touch does.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("ref") {
				return exactArgs(0)(cmd, args)
			}
			return exactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if cmd.Flags().Changed("touch") {
				if !cmd.Flags().Changed("ref") {
					return usageError("--touch: only with --ref")
				}
				if err := ref.CheckTTL(touch); err != nil {
					return usageError("--touch %v: want a positive duration such as 1h, at least 1µs", touch)
				}
			}
			if cmd.Flags().Changed("ref") {
				if err := ref.CheckName(refName); err != nil {
					return fmt.Errorf("--ref: %w", err)
				}
				return e.withStore(ctx, func(st *stead.Store) error {
					_, rd, err := st.Refs.Open(ctx, refName, touch)
					if err != nil {
						return err
					}
					return e.writeValue(rd, out)
				})
			}
			key, err := parseKey(args[0])
			if err != nil {
				return err
			}
			return e.withStore(ctx, func(st *stead.Store) error {
				rd, err := st.Blobs.Get(ctx, key)
				if err != nil {
					return err
				}
				return e.writeValue(rd, out)
			})
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to FILE instead of stdout")
	cmd.Flags().StringVar(&refName, "ref", "", "write the blob the ref NAME points at (no KEY)")
	cmd.Flags().DurationVar(&touch, "touch", 0, "with --ref: renew an expiring ref to expire this long from now, when less than half of it is left")
	return cmd
}

// writeValue copies rd to stdout (out "" or "-") or the file out, and
// closes rd.
func (e *env) writeValue(rd *blob.Reader, out string) error {
	defer rd.Close()
	toStdout := out == "" || out == "-"
	var bar *bar
	if !toStdout || !e.stdoutTTY { // no bar over the value on the terminal
		bar = e.bytesBar("get", rd.Size())
	}
	defer bar.done()
	if toStdout {
		_, err := io.Copy(e.stdout, bar.reader(rd))
		return err
	}
	return writeOutput(out, bar.reader(rd))
}

// writeOutput writes r to path so that a failed get leaves no half-written
// file: a new file is removed on failure, and an existing regular file is
// replaced by a renamed sibling that keeps its mode. Anything else the path
// names (a symlink, a FIFO, a device) is opened and written through.
func writeOutput(path string, r io.Reader) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
		if err != nil {
			return err
		}
		if err := copyClose(f, r); err != nil {
			os.Remove(path)
			return err
		}
		return nil
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return err
		}
		return copyClose(f, r)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := copyClose(tmp, r); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func copyClose(f *os.File, r io.Reader) error {
	_, err := io.Copy(f, r)
	return errors.Join(err, f.Close())
}

func statCommand(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stat KEY",
		Short: "Print a blob's size",
		Args:  exactArgs(1),
		RunE: e.onKey(func(ctx context.Context, st *stead.Store, key blob.Key) error {
			info, err := st.Blobs.Stat(ctx, key)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(e, map[string]any{"key": info.Key.String(), "size": info.Size})
			}
			fmt.Fprintf(e.stdout, "%s %d\n", info.Key, info.Size)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func lsCommand(e *env) *cobra.Command {
	var (
		after  string
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List blobs in key order: KEY SIZE per line",
		Long: `List blobs in key order, one "KEY SIZE" line each (or one JSON object
per line with --json), reading the store a page at a time. --after
resumes after a key; --limit stops after that many.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var from blob.Key
			if after != "" {
				key, err := parseKey(after)
				if err != nil {
					return err
				}
				from = key
			}
			if limit < 0 {
				return usageError("--limit %d: want 0 (all) or more", limit)
			}
			return e.withStore(cmd.Context(), func(st *stead.Store) error {
				n := 0
				for info, err := range st.Blobs.All(cmd.Context(), from) {
					if err != nil {
						return err
					}
					if asJSON {
						if err := writeJSON(e, map[string]any{"key": info.Key.String(), "size": info.Size}); err != nil {
							return err
						}
					} else if _, err := fmt.Fprintf(e.stdout, "%s %d\n", info.Key, info.Size); err != nil {
						return err
					}
					if n++; limit > 0 && n == limit {
						break
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&after, "after", "", "list keys after this one")
	cmd.Flags().IntVar(&limit, "limit", 0, "list at most this many (0: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per line")
	return cmd
}

func rmCommand(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "rm KEY...",
		Short: "Delete blobs",
		Args:  minArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			keys := make([]blob.Key, len(args))
			for i, a := range args {
				key, err := parseKey(a)
				if err != nil {
					return err
				}
				keys[i] = key
			}
			return e.withStore(cmd.Context(), func(st *stead.Store) error {
				for _, key := range keys {
					if err := st.Blobs.Delete(cmd.Context(), key); err != nil {
						return whyProtected(cmd.Context(), st, key, err)
					}
				}
				return nil
			})
		},
	}
}

// whyProtected adds to a refused delete of key what protects it, as gc
// explain says it; err is returned as is when it is no such refusal or
// the explanation names nothing.
func whyProtected(ctx context.Context, st *stead.Store, key blob.Key, err error) error {
	if !errors.Is(err, stead.ErrProtected) {
		return err
	}
	x, xerr := st.GC.Explain(ctx, key)
	if why, ok := strings.CutPrefix(x.Verdict(), "kept: "); xerr == nil && ok {
		return fmt.Errorf("%w: %s", err, why)
	}
	return err
}

func writeJSON(e *env, v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// exactArgs and minArgs are cobra's argument checks as usage errors.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError("want %d argument(s), got %d (see %s --help)", n, len(args), cmd.CommandPath())
		}
		return nil
	}
}

func rangeArgs(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return usageError("want %d to %d argument(s), got %d (see %s --help)", lo, hi, len(args), cmd.CommandPath())
		}
		return nil
	}
}

func minArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usageError("want at least %d argument(s), got %d (see %s --help)", n, len(args), cmd.CommandPath())
		}
		return nil
	}
}
