package registry

import (
	"regexp"
	"strings"

	"github.com/steadkit/stead/blob"
)

// maxNameLen bounds a repository name, in bytes: the ref names built from
// it stay well under ref.MaxNameLen.
const maxNameLen = 255

var (
	// nameRE is the distribution spec's repository name grammar.
	nameRE = regexp.MustCompile(`^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$`)
	// tagRE is the spec's tag grammar.
	tagRE = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)
	// digestRE is the OCI digest grammar (image-spec descriptor.md):
	// algorithm ":" encoded.
	digestRE = regexp.MustCompile(`^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$`)
)

// checkName checks a repository name against the spec's grammar.
func checkName(name string) *regError {
	if len(name) > maxNameLen || !nameRE.MatchString(name) {
		return errorf(codeNameInvalid, "repository name %.80q: want lowercase components of [a-z0-9] joined by '.', '_', '__' or '-', separated by '/', at most %d bytes", name, maxNameLen)
	}
	return nil
}

// parseDigest parses an OCI digest, refusing any algorithm but sha256:
// stead addresses content by SHA-256 only.
func parseDigest(s string) (blob.Key, *regError) {
	k, err := blob.ParseKey(s)
	if err == nil {
		return k, nil
	}
	if len(s) <= 200 && digestRE.MatchString(s) && !strings.HasPrefix(s, "sha256:") {
		alg, _, _ := strings.Cut(s, ":")
		return blob.Key{}, errorf(codeDigestInvalid, "digest algorithm %q is not supported: stead stores sha256 digests only", alg)
	}
	return blob.Key{}, errorf(codeDigestInvalid, "digest %.80q: want sha256: and 64 lowercase hex digits", s)
}

// The refs a repository's content is kept by. No repository name
// component starts with '_', so "oci/<repo>/_tags/" lists one
// repository's tags and no other's.
func tagRef(repo, tag string) string { return "oci/" + repo + "/_tags/" + tag }
func tagPrefix(repo string) string   { return "oci/" + repo + "/_tags/" }

// manifestRef links a manifest to its repository and keeps it, tagged or
// not, until it is deleted.
func manifestRef(repo string, d blob.Key) string { return keyedRef(repo, "/_manifests/", d) }
func manifestPrefix(repo string) string          { return "oci/" + repo + "/_manifests/" }

// blobRef links a blob to its repository: a weak ref to it, so it says the
// repository holds the blob without keeping it alive, and goes with the
// blob when a sweep collects it.
func blobRef(repo string, d blob.Key) string { return keyedRef(repo, "/_blobs/", d) }

// pendingRef keeps a pushed blob alive, with an expiry, until a manifest
// that references it is pushed.
func pendingRef(repo string, d blob.Key) string { return keyedRef(repo, "/_pending/", d) }

// keyedRef is "oci/" + repo + infix + d.String(), built in one allocation.
func keyedRef(repo, infix string, d blob.Key) string {
	var text [blob.KeyLen]byte
	key, _ := d.AppendText(text[:0])
	var b strings.Builder
	b.Grow(len(RefPrefix) + len(repo) + len(infix) + len(key))
	b.WriteString(RefPrefix)
	b.WriteString(repo)
	b.WriteString(infix)
	b.Write(key)
	return b.String()
}

// referrerRef links the manifest d to its subject's referrers list.
func referrerRef(repo string, subject, d blob.Key) string {
	return referrerPrefix(repo, subject) + d.String()
}
func referrerPrefix(repo string, subject blob.Key) string {
	return "oci/" + repo + "/_referrers/" + subject.String() + "/"
}

// RefPrefix begins the name of every ref the registry keeps.
const RefPrefix = "oci/"

// repoPrefix is the prefix of every ref of repo.
func repoPrefix(repo string) string { return RefPrefix + repo + "/_" }

// route is a parsed /v2/ path.
type route struct {
	kind string // "base", "catalog", "blob", "upload", "uploads", "manifest", "tags", "referrers"
	name string
	item string // digest, reference or upload id
}

// parseRoute splits a path below /v2/ into its route; ok is false for
// none of the spec's endpoints.
func parseRoute(p string) (route, bool) {
	switch p {
	case "":
		return route{kind: "base"}, true
	case "_catalog":
		return route{kind: "catalog"}, true
	}
	if name, ok := strings.CutSuffix(p, "/blobs/uploads/"); ok {
		return route{kind: "uploads", name: name}, name != ""
	}
	if name, ok := strings.CutSuffix(p, "/tags/list"); ok {
		return route{kind: "tags", name: name}, name != ""
	}
	rest, item, ok := cutLast(p)
	if !ok || item == "" {
		return route{}, false
	}
	name, kind, ok := cutLast(rest)
	if !ok || name == "" {
		return route{}, false
	}
	switch kind {
	case "blobs":
		return route{kind: "blob", name: name, item: item}, true
	case "manifests":
		return route{kind: "manifest", name: name, item: item}, true
	case "referrers":
		return route{kind: "referrers", name: name, item: item}, true
	case "uploads":
		if name, ok := strings.CutSuffix(name, "/blobs"); ok && name != "" {
			return route{kind: "upload", name: name, item: item}, true
		}
	}
	return route{}, false
}

func cutLast(p string) (before, after string, ok bool) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", "", false
	}
	return p[:i], p[i+1:], true
}
