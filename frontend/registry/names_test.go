package registry

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseRoute(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path string
		want route
		ok   bool
	}{
		{"", route{kind: "base"}, true},
		{"a/b/blobs/uploads/", route{kind: "uploads", name: "a/b"}, true},
		{"a/blobs/uploads/x1", route{kind: "upload", name: "a", item: "x1"}, true},
		{"a/blobs/blobs/uploads/x", route{kind: "upload", name: "a/blobs", item: "x"}, true},
		{"a/blobs/sha256:x", route{kind: "blob", name: "a", item: "sha256:x"}, true},
		{"a/manifests/manifests/v1", route{kind: "manifest", name: "a/manifests", item: "v1"}, true},
		{"a/tags/list", route{kind: "tags", name: "a"}, true},
		{"tags/list", route{kind: "manifest"}, false},
		{"a/referrers/sha256:x", route{kind: "referrers", name: "a", item: "sha256:x"}, true},
		{"a/blobs/", route{}, false},
		{"blobs/x", route{}, false},
		{"a/other/x", route{}, false},
		{"/blobs/uploads/", route{}, false},
		{"a/uploads/x", route{}, false},
	} {
		got, ok := parseRoute(tc.path)
		if ok != tc.ok || ok && got != tc.want {
			t.Errorf("parseRoute(%q) = %+v, %v; want %+v, %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

// FuzzParseRoute checks that a parsed route names a repository and puts
// the path back together.
func FuzzParseRoute(f *testing.F) {
	for _, s := range []string{"", "a/blobs/uploads/", "a/blobs/uploads/id", "a/b/manifests/v1", "a/tags/list", "x/referrers/d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rt, ok := parseRoute(p)
		if !ok || rt.kind == "base" {
			return
		}
		if rt.name == "" {
			t.Fatalf("parseRoute(%q) = %+v without a name", p, rt)
		}
		var back string
		switch rt.kind {
		case "uploads":
			back = rt.name + "/blobs/uploads/"
		case "upload":
			back = rt.name + "/blobs/uploads/" + rt.item
		case "tags":
			back = rt.name + "/tags/list"
		default:
			back = rt.name + "/" + map[string]string{"blob": "blobs", "manifest": "manifests", "referrers": "referrers"}[rt.kind] + "/" + rt.item
			if strings.Contains(rt.item, "/") || rt.item == "" {
				t.Fatalf("parseRoute(%q) item %q", p, rt.item)
			}
		}
		if back != p {
			t.Fatalf("parseRoute(%q) = %+v, which is %q", p, rt, back)
		}
	})
}

// FuzzContentRange checks that a parsed range is well formed and that
// its text is the canonical one (or with a "bytes " unit).
func FuzzContentRange(f *testing.F) {
	for _, s := range []string{"0-0", "5-9", "bytes 0-3", "9-5", "-1-3", "+1-3", "0-9223372036854775807", "1-", "-"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		start, end, ok := parseContentRange(s)
		if !ok {
			return
		}
		if start < 0 || end < start || end == 1<<63-1 {
			t.Fatalf("parseContentRange(%q) = %d, %d", s, start, end)
		}
		a, b, _ := strings.Cut(strings.TrimPrefix(s, "bytes "), "-")
		if x, _ := strconv.ParseInt(a, 10, 64); x != start {
			t.Fatalf("start %d from %q", start, s)
		}
		if y, _ := strconv.ParseInt(b, 10, 64); y != end {
			t.Fatalf("end %d from %q", end, s)
		}
	})
}

func TestCheckName(t *testing.T) {
	t.Parallel()
	for name, ok := range map[string]bool{
		"a": true, "a/b": true, "a-b": true, "a--b": true, "a__b": true, "a.b": true, "library/ubuntu": true,
		"a___b": false, "a._b": false, "A": false, "a/": false, "/a": false, "a//b": false, "a/_x": false, "": false,
		strings.Repeat("a", 255): true, strings.Repeat("a", 256): false,
	} {
		if got := checkName(name) == nil; got != ok {
			t.Errorf("checkName(%q) ok = %v; want %v", name, got, ok)
		}
	}
}
