package bytestier_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/steadkit/stead/engine/internal/bytestier"
	"github.com/steadkit/stead/steaderr"
)

// A listing of a file:// bucket while writers create and rename their
// temporary files, as every put does, sees each file that stays and fails
// never: a file gone between reading its directory and its attributes is
// no error.
func TestListDuringWrites(t *testing.T) {
	t.Parallel()
	tier, dir := fileTier(t)
	ctx := context.Background()
	kept := writeObject(t, tier)
	sub := filepath.Join(dir, filepath.FromSlash(kept), "..")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tmp := filepath.Join(sub, fmt.Sprintf("churn%d-%d.tmp", w, i))
				if err := os.WriteFile(tmp, nil, 0o600); err != nil {
					t.Error(err)
					return
				}
				if err := os.Remove(tmp); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	defer wg.Wait()
	defer close(stop)
	for range 2000 {
		objs, _, err := tier.List(ctx, nil, 100)
		if err != nil {
			t.Fatalf("List during writes: %v", err)
		}
		if len(objs) != 1 || objs[0].Name != kept {
			t.Fatalf("List during writes: %+v, want only %s", objs, kept)
		}
	}
}

// Pages of a file:// bucket's listing hold every object once, in name
// order, a temporary file under the name it is renamed to.
func TestListPages(t *testing.T) {
	t.Parallel()
	tier, dir := fileTier(t)
	ctx := context.Background()
	if objs, next, err := tier.List(ctx, nil, 3); err != nil || len(objs) != 0 || next != nil {
		t.Fatalf("List of an empty bucket: %v, %q, %v", objs, next, err)
	}
	var want []string
	for range 10 {
		want = append(want, writeObject(t, tier))
	}
	writing := bytestier.NewName()
	tmp := filepath.Join(dir, filepath.FromSlash(writing)) + ".18ed559b59a57dd9.tmp"
	if err := os.MkdirAll(filepath.Dir(tmp), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tmp, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	want = append(want, writing)
	slices.Sort(want)
	var got []string
	var token []byte
	for pages := 0; ; pages++ {
		objs, next, err := tier.List(ctx, token, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			got = append(got, o.Name)
		}
		if next == nil {
			break
		}
		if pages > len(want) {
			t.Fatal("List does not end")
		}
		token = next
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pages list\n%v\nwant\n%v", got, want)
	}
}

// A listing lists only where a store writes: directories under o/ that
// cannot hold its objects and files that are not its objects are neither
// listed nor read, and fail nothing. lost+found is made unreadable, which
// only a test run as another user than root can tell.
func TestListSkipsForeignEntries(t *testing.T) {
	t.Parallel()
	tier, dir := fileTier(t)
	ctx := context.Background()
	kept := writeObject(t, tier)
	hex30 := strings.Repeat("0", 30)
	for _, foreign := range []string{
		"o/lost+found/" + hex30,
		"o/zz/" + hex30,
		"o/abc/" + hex30,
		"o/ab/sub/" + hex30,
		"o/ab.bak",
		"o/ab/" + hex30 + ".bak",
	} {
		path := filepath.Join(dir, filepath.FromSlash(foreign))
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	lostFound := filepath.Join(dir, "o", "lost+found")
	if err := os.Chmod(lostFound, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(lostFound, 0o700) })
	objs, next, err := tier.List(ctx, nil, 10)
	if err != nil {
		t.Fatalf("List with foreign entries: %v", err)
	}
	if len(objs) != 1 || objs[0].Name != kept || next != nil {
		t.Fatalf("List with foreign entries: %+v, %q; want only %s", objs, next, kept)
	}
}

// A bucket URL Open cannot serve as asked is refused, naming the fix.
func TestOpenRefuses(t *testing.T) {
	t.Parallel()
	dir := filepath.ToSlash(t.TempDir())
	for _, u := range []string{
		"",
		"no scheme",
		"file://relative/dir",
		"file://otherhost" + dir,
		"file://" + dir + "?prefix=store1/",
		"nosuchscheme://bucket",
	} {
		if tier, err := bytestier.Open(context.Background(), u); !errors.Is(err, steaderr.ErrInvalidArgument) {
			if tier != nil {
				_ = tier.Close()
			}
			t.Errorf("Open(%q) = %v, want ErrInvalidArgument", u, err)
		}
	}
}

// fileTier opens a tier over a fresh file:// bucket, closed with the test,
// and returns it with the bucket's directory.
func fileTier(t *testing.T) (*bytestier.Tier, string) {
	t.Helper()
	dir := t.TempDir()
	tier, err := bytestier.Open(context.Background(), "file://"+filepath.ToSlash(dir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tier.Close() })
	return tier, dir
}

// writeObject writes a small object under a new name and returns the name.
func writeObject(t *testing.T, tier *bytestier.Tier) string {
	t.Helper()
	name := bytestier.NewName()
	if _, err := tier.Write(context.Background(), name, strings.NewReader(name), 0, nil); err != nil {
		t.Fatal(err)
	}
	return name
}

// A file:// bucket on a directory that does not exist is a mistyped path:
// Open refuses it naming the directory and creates nothing, unless the URL
// asks for it with create_dir.
func TestOpenRefusesMissingDirectory(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "no", "such")
	tier, err := bytestier.Open(context.Background(), "file://"+filepath.ToSlash(missing))
	if tier != nil {
		_ = tier.Close()
	}
	if !errors.Is(err, steaderr.ErrInvalidArgument) || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "create_dir") {
		t.Fatalf("Open on a missing directory = %v, want ErrInvalidArgument naming it and create_dir", err)
	}
	if _, err := os.Stat(filepath.Dir(missing)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open created %s: %v", filepath.Dir(missing), err)
	}
	// fileblob would create it for any non-empty value: stead takes 1 only.
	for _, v := range []string{"0", "", "yes"} {
		tier, err := bytestier.Open(context.Background(), "file://"+filepath.ToSlash(missing)+"?create_dir="+v)
		if tier != nil {
			_ = tier.Close()
		}
		if !errors.Is(err, steaderr.ErrInvalidArgument) || !strings.Contains(err.Error(), "want create_dir=1") {
			t.Fatalf("Open with create_dir=%q = %v, want ErrInvalidArgument asking for create_dir=1", v, err)
		}
		if _, err := os.Stat(filepath.Dir(missing)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Open with create_dir=%q created %s: %v", v, filepath.Dir(missing), err)
		}
	}
	tier, err = bytestier.Open(context.Background(), "file://"+filepath.ToSlash(missing)+"?create_dir=1")
	if err != nil {
		t.Fatalf("Open with create_dir=1: %v", err)
	}
	_ = tier.Close()
	if fi, err := os.Stat(missing); err != nil || !fi.IsDir() {
		t.Fatalf("Open with create_dir=1 left no directory: %v", err)
	}
}
