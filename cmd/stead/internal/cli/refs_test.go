package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/ref"
)

// TestRefCommands keeps blobs with refs and references from the command
// line, and lets them go again.
func TestRefCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db := "sqlite://" + filepath.Join(dir, "s.db")
	layer := filepath.Join(dir, "layer")
	if err := os.WriteFile(layer, []byte("a layer"), 0o644); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, "manifest")
	if err := os.WriteFile(manifest, []byte("a manifest"), 0o644); err != nil {
		t.Fatal(err)
	}
	layerKey := blob.KeyOf([]byte("a layer")).String()
	manifestKey := blob.KeyOf([]byte("a manifest")).String()

	code, _, errOut := run(t, ctx, "--db", db, "put", "--child", blob.KeyOf([]byte("never put")).String(), manifest)
	if code != exitNotFound || !strings.Contains(errOut, "not stored") {
		t.Fatalf("put with a missing child = %d, %q; want %d naming it", code, errOut, exitNotFound)
	}
	if code, out, errOut := run(t, ctx, "--db", db, "put", layer); code != 0 || strings.TrimSpace(out) != layerKey {
		t.Fatalf("put layer = %d, %q, %q", code, out, errOut)
	}
	if code, out, errOut := run(t, ctx, "--db", db, "put", "--ref", "tags/app/v1", "--child", layerKey, manifest); code != 0 || strings.TrimSpace(out) != manifestKey {
		t.Fatalf("put --ref --child = %d, %q, %q", code, out, errOut)
	}
	code, out, _ := run(t, ctx, "--db", db, "ref", "ls", "tags/")
	if code != 0 || !strings.Contains(out, "tags/app/v1") || !strings.Contains(out, manifestKey) || !strings.Contains(out, "never") {
		t.Fatalf("ref ls = %d, %q", code, out)
	}
	code, out, _ = run(t, ctx, "--db", db, "gc", "explain", layerKey)
	if code != 0 || !strings.Contains(out, "parent") || !strings.Contains(out, manifestKey) {
		t.Fatalf("gc explain of the layer = %d, %q; want its parent", code, out)
	}
	code, out, _ = run(t, ctx, "--db", db, "gc", "explain", manifestKey)
	if code != 0 || !strings.Contains(out, "tags/app/v1") {
		t.Fatalf("gc explain of the manifest = %d, %q; want its ref", code, out)
	}
	// A store that declares refs is swept without --all-unreferenced.
	if code, out, errOut := run(t, ctx, "--db", db, "gc"); code != 0 || !strings.Contains(out, "staged 0") {
		t.Fatalf("gc = %d, %q, %q; want nothing staged", code, out, errOut)
	}
	code, out, _ = run(t, ctx, "--db", db, "ref", "set", "--ttl", "1h", "--annotation", "cache", "cache/x", layerKey)
	if code != 0 || !strings.Contains(out, "cache/x") || !strings.Contains(out, `"cache"`) {
		t.Fatalf("ref set = %d, %q", code, out)
	}
	if code, _, errOut := run(t, ctx, "--db", db, "ref", "set", "--if-absent", "cache/x", layerKey); code != exitFailure || !strings.Contains(errOut, "conflict") {
		t.Fatalf("ref set --if-absent over a live ref = %d, %q", code, errOut)
	}
	if code, out, _ := run(t, ctx, "--db", db, "ref", "get", "cache/x"); code != 0 || !strings.Contains(out, layerKey) {
		t.Fatalf("ref get = %d, %q", code, out)
	}
	if code, _, _ := run(t, ctx, "--db", db, "ref", "rm", "cache/x", "tags/app/v1"); code != 0 {
		t.Fatalf("ref rm = %d", code)
	}
	if code, _, _ := run(t, ctx, "--db", db, "ref", "get", "cache/x"); code != exitNotFound {
		t.Fatalf("ref get after rm = %d, want %d", code, exitNotFound)
	}
	for _, bad := range [][]string{{"ref", "set", "a//b", layerKey}, {"ref", "set", "x", "sha256:nope"}, {"ref", "ls", "a", "b"}, {"ref", "set", "x"}, {"ref", "get", "--touch", "-1h", "x"}} {
		if code, _, _ := run(t, ctx, append([]string{"--db", db}, bad...)...); code == 0 {
			t.Errorf("%v succeeded", bad)
		}
	}
	// A put naming a bad ref stores nothing.
	orphan := filepath.Join(dir, "orphan")
	if err := os.WriteFile(orphan, []byte("never kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := run(t, ctx, "--db", db, "put", "--ref", "a//b", orphan); code == 0 || !strings.Contains(errOut, "--ref") {
		t.Fatalf("put --ref a//b = %d, %q; want refused naming the flag", code, errOut)
	}
	if code, _, _ := run(t, ctx, "--db", db, "stat", blob.KeyOf([]byte("never kept")).String()); code != exitNotFound {
		t.Fatalf("stat after a refused put --ref = %d, want %d: the blob was stored", code, exitNotFound)
	}
}

// TestRefRmAndBinaryAnnotations: ref rm with a bad name among its
// arguments deletes nothing, and ref ls --json keeps an annotation's bytes.
func TestRefRmAndBinaryAnnotations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := "sqlite://" + filepath.Join(t.TempDir(), "s.db")
	st, err := stead.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	key, err := st.Blobs.Put(ctx, strings.NewReader("rm review"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Refs.Set(ctx, "keep/me", key, ref.SetOptions{Annotation: []byte{0xff, 0x00, 'a'}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	code, out, _ := run(t, ctx, "--db", db, "ref", "ls", "--json")
	var line struct {
		Annotation       string
		AnnotationBase64 string `json:"annotation_base64"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &line); code != 0 || err != nil || line.Annotation != "" || line.AnnotationBase64 != base64.StdEncoding.EncodeToString([]byte{0xff, 0x00, 'a'}) {
		t.Errorf("ref ls --json = %d %q (%v); want the annotation's bytes as annotation_base64", code, out, err)
	}
	if code, _, _ := run(t, ctx, "--db", db, "ref", "rm", "keep/me", "bad//name"); code == 0 {
		t.Fatal("ref rm with a bad name succeeded")
	}
	if code, out, errOut := run(t, ctx, "--db", db, "ref", "get", "keep/me"); code != 0 {
		t.Fatalf("after a refused ref rm, ref get keep/me = %d %q %q: it was deleted", code, out, errOut)
	}
}

// An explicit --ttl must be positive: 0 does not mean "never" when given.
func TestRefSetZeroTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := "sqlite://" + filepath.Join(t.TempDir(), "s.db")
	key := blob.KeyOf([]byte("v")).String()
	for _, ttl := range []string{"0s", "-1s"} {
		code, out, errOut := run(t, ctx, "--db", db, "ref", "set", "--ttl", ttl, "app", key)
		if code != exitUsage || !strings.Contains(errOut, "--ttl") {
			t.Errorf("ref set --ttl %s = %d, %q, %q; want %d naming --ttl", ttl, code, out, errOut, exitUsage)
		}
	}
}

// A TTL below the store's resolution (1µs) is a usage error naming it, in
// every command that takes --ttl: not a silent 0, not "leave --ttl out".
func TestTTLBelowResolution(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := "sqlite://" + filepath.Join(t.TempDir(), "s.db")
	key := blob.KeyOf([]byte("v")).String()
	for _, args := range [][]string{
		{"ref", "set", "--ttl", "1ns", "app", key},
		{"ref", "set", "--ttl", "999ns", "app", key},
		{"lock", "--ttl", "1ns", "job", "--", "true"},
		{"records", "claim", "--group", "g", "--ttl", "1ns", "r"},
	} {
		code, out, errOut := run(t, ctx, append([]string{"--db", db}, args...)...)
		if code != exitUsage || !strings.Contains(errOut, "--ttl") || !strings.Contains(errOut, "resolution") || strings.Contains(errOut, "leave --ttl out") {
			t.Errorf("stead %q = %d, %q, %q; want %d naming --ttl and the resolution", args, code, out, errOut, exitUsage)
		}
	}
	for _, args := range [][]string{
		{"lock", "--ttl", "-1s", "job", "--", "true"},
		{"records", "claim", "--group", "g", "--ttl", "-1s", "r"},
	} {
		if code, out, errOut := run(t, ctx, append([]string{"--db", db}, args...)...); code != exitUsage || !strings.Contains(errOut, "--ttl") {
			t.Errorf("stead %q = %d, %q, %q; want %d naming --ttl", args, code, out, errOut, exitUsage)
		}
	}
}

// TestPutRef: put --ref stores a value and its ref, and get --ref reads
// them back, on each store kind the CLI tests (local SQLite, a server);
// a refused ref stores nothing when the value is inline, and leaves the
// ref as it was when it is not.
func TestPutRef(t *testing.T) {
	t.Parallel()
	large := strings.Repeat("large value ", blob.InlineLimit/12+1)
	tests := []struct {
		name, value, ref string
		ifAbsent         bool
		wantCode         int
		wantStored       bool // after a refusal
	}{
		{name: "inline", value: "a small value", ref: "tags/new", wantCode: 0},
		{name: "inline-refused", value: "a refused value", ref: "tags/v1", ifAbsent: true, wantCode: exitFailure},
		{name: "large", value: large, ref: "tags/large", wantCode: 0},
		{name: "large-refused", value: large + "refused", ref: "tags/v1", ifAbsent: true, wantCode: exitFailure, wantStored: true},
	}
	for _, kind := range []string{"sqlite", "remote"} {
		for _, tc := range tests {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				db := storeURL(t)
				seed(t, db)
				seedRefs(t, db)
				url := db
				if kind == "remote" {
					url = serve(t, db)
				}
				file := filepath.Join(t.TempDir(), "value")
				if err := os.WriteFile(file, []byte(tc.value), 0o644); err != nil {
					t.Fatal(err)
				}
				key := blob.KeyOf([]byte(tc.value))
				args := []string{"--db", url, "put", "--ref", tc.ref, file}
				if tc.ifAbsent {
					args = append(args, "--if-absent")
				}
				code, out, errOut := run(t, t.Context(), args...)
				if code != tc.wantCode {
					t.Fatalf("put --ref = %d, %q, %q; want exit %d", code, out, errOut, tc.wantCode)
				}
				st := openStore(t, db)
				r, err := st.Refs.Get(t.Context(), tc.ref)
				if err != nil {
					t.Fatal(err)
				}
				_, statErr := st.Blobs.Stat(t.Context(), key)
				if code != 0 {
					if !strings.Contains(errOut, "conflict") {
						t.Errorf("refused put --ref: stderr %q, want a conflict", errOut)
					}
					if r.Key.String() != alpha {
						t.Errorf("after a refused put --ref, %s names %s, want %s as before", tc.ref, r.Key, alpha)
					}
					if stored := statErr == nil; stored != tc.wantStored {
						t.Errorf("after a refused put --ref, the blob is stored: %v (%v), want %v", stored, statErr, tc.wantStored)
					}
					return
				}
				if strings.TrimSpace(out) != key.String() || r.Key != key || statErr != nil {
					t.Fatalf("put --ref printed %q, ref names %s, stat: %v; want %s stored and named", out, r.Key, statErr, key)
				}
				if code, got, errOut := run(t, t.Context(), "--db", url, "get", "--ref", tc.ref); code != 0 || got != tc.value {
					t.Errorf("get --ref = %d, %d bytes, %q; want the %d bytes put", code, len(got), errOut, len(tc.value))
				}
			})
		}
	}
}

// TestGetRefTouch: get --ref --touch renews an expiring ref as it reads
// it, keeping its version, on SQLite and over a server; get --ref alone
// renews nothing.
func TestGetRefTouch(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"sqlite", "remote"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			db := storeURL(t)
			seed(t, db)
			st := openStore(t, db)
			k, err := blob.ParseKey(alpha)
			if err != nil {
				t.Fatal(err)
			}
			set, err := st.Refs.Set(t.Context(), "cache/t", k, ref.SetOptions{TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			url := db
			if kind == "remote" {
				url = serve(t, db)
			}
			for _, c := range []struct {
				args  []string
				renew bool
			}{
				{[]string{"get", "--ref", "cache/t"}, false},
				{[]string{"get", "--ref", "cache/t", "--touch", "1h"}, true},
			} {
				if code, out, errOut := run(t, t.Context(), append([]string{"--db", url}, c.args...)...); code != 0 || out != "alpha" {
					t.Fatalf("%v = %d, %q, %q; want alpha", c.args, code, out, errOut)
				}
				r, err := st.Refs.Get(t.Context(), "cache/t")
				if err != nil {
					t.Fatal(err)
				}
				if renewed := r.Expiry.After(set.Expiry.Add(30 * time.Minute)); renewed != c.renew || r.Version != set.Version {
					t.Errorf("after %v the ref expires %v, version %d; set to expire %v, version %d; want renewed %v, the version kept", c.args, r.Expiry, r.Version, set.Expiry, set.Version, c.renew)
				}
			}
		})
	}
}
