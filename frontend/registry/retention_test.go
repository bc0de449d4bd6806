package registry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/frontend/registry"
	"github.com/steadkit/stead/internal/clock"
	"github.com/steadkit/stead/internal/testing/fronttest"
	"github.com/steadkit/stead/server"
	"github.com/steadkit/stead/steaderr"
)

const policy = `
rules:
  - repositories: ["keep/*"]
    keep_tags: ["v*"]
    immutable_tags: ["release-*"]
  - repositories: ["recent"]
    keep_most_recent: 2
  - repositories: ["window"]
    keep_pushed_within: 24h
    delete_untagged_after: 1h
  - repositories: ["combo"]
    keep_tags: ["stable"]
    keep_most_recent: 1
    keep_pushed_within: 55h
    immutable_tags: ["release-*"]
`

func TestParseRetention(t *testing.T) {
	t.Parallel()
	r, err := registry.ParseRetention([]byte(policy))
	if err != nil || len(r.Rules) != 4 || r.Rules[2].KeepPushedWithin != 24*time.Hour || r.Rules[1].KeepMostRecent != 2 {
		t.Fatalf("ParseRetention = %+v, %v", r, err)
	}
	if r, err := registry.ParseRetention(nil); err != nil || len(r.Rules) != 0 {
		t.Fatalf("an empty policy = %+v, %v", r, err)
	}
	for _, bad := range []string{
		"rules:\n  - repositories: [a]\n    keep_tag: [v]\n",        // unknown field
		"rules:\n  - repositories: [\"[\"]\n",                       // bad pattern
		"rules:\n  - repositories: [a]\n    keep_most_recent: -1\n", // negative
		"rules:\n  - keep_tags: [v]\n",                              // no repositories
		"rules:\n  - repositories: [a]\n    keep_pushed_within: soon\n",
		"rules:\n  - repositories: [a]\n    keep_pulled_within: -1h\n",
	} {
		if _, err := registry.ParseRetention([]byte(bad)); !errors.Is(err, steaderr.ErrInvalidArgument) {
			t.Errorf("ParseRetention(%q) = %v, want ErrInvalidArgument", bad, err)
		}
	}
}

// tagsOf lists repo's tags over the API.
func (c *client) tagsOf(repo string) []string {
	c.t.Helper()
	resp, body := c.do("GET", "/v2/"+repo+"/tags/list", nil, nil)
	var list struct{ Tags []string }
	if resp.StatusCode != 200 || json.Unmarshal(body, &list) != nil {
		c.t.Fatalf("tags of %s = %d %s", repo, resp.StatusCode, body)
	}
	slices.Sort(list.Tags)
	return list.Tags
}

// TestRetention applies every rule of a policy, alone and combined, on a
// fake clock: a dry run lists what goes and changes nothing, the run
// deletes just that, and immutable tags refuse to move or go.
func TestRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clock.NewFake(time.Now())
	st, err := stead.Open(ctx, "mem://", stead.WithClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	ret, err := registry.ParseRetention([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(st, registry.Options{Retention: ret, Now: clk.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	addr := fronttest.Serve(t, st, server.Options{Mounts: []server.Mount{{Prefix: registry.Prefix, Handler: reg}}})
	t.Cleanup(func() {
		st.Close()
	})
	c := &client{t: t, base: "http://" + addr, st: st}
	base := bytes.Repeat([]byte("base\n"), 100)
	push := func(repo, tag string) pushed { return c.pushImage(repo, tag, base, repo+"/"+tag) }

	// Ten hours between pushes, from t0.
	step := func() { clk.Advance(10 * time.Hour) }
	push("keep/app", "v1")
	push("keep/app", "dev1")
	release := push("keep/app", "release-1")
	push("recent", "a")
	push("combo", "stable")
	oldWindow := push("window", "old")
	step() // t0+10h
	push("recent", "b")
	push("combo", "release-1")
	push("keep/app", "dev2")
	step() // t0+20h
	push("recent", "c")
	push("combo", "x")
	step() // t0+30h
	push("recent", "d")
	push("combo", "y")
	step() // t0+40h
	push("combo", "z")
	push("other", "anything")   // no rule: untouched
	clk.Advance(30 * time.Hour) // t0+70h
	push("window", "new")
	clk.Advance(10 * time.Hour) // t0+80h

	want := []string{
		"combo:x",                    // older than 55h, not the most recent, not stable
		"keep/app:dev1",              // matches no keep_tags
		"keep/app:dev2",              //
		"recent:a",                   // not among the 2 most recent
		"recent:b",                   //
		"window:old",                 // pushed 80h ago, outside 24h
		"window@" + oldWindow.digest, // then untagged, pushed over 1h ago
	}
	names := func(got registry.Collected) []string {
		var out []string
		for _, d := range got.Deleted {
			if d.Tag != "" {
				out = append(out, d.Repository+":"+d.Tag)
			} else {
				out = append(out, d.Repository+"@"+d.Digest)
			}
		}
		slices.Sort(out)
		return out
	}
	slices.Sort(want)
	dry, err := reg.Collect(ctx, registry.CollectOptions{DryRun: true})
	if err != nil || !slices.Equal(names(dry), want) {
		t.Fatalf("dry run = %v, %v;\nwant %v", names(dry), err, want)
	}
	if got := c.tagsOf("recent"); len(got) != 4 {
		t.Fatalf("a dry run deleted tags: recent has %v", got)
	}
	done, err := reg.Collect(ctx, registry.CollectOptions{})
	if err != nil || !slices.Equal(names(done), want) {
		t.Fatalf("Collect = %v, %v;\nwant %v", names(done), err, want)
	}
	for repo, tags := range map[string][]string{
		"keep/app": {"release-1", "v1"},
		"recent":   {"c", "d"},
		"combo":    {"release-1", "stable", "y", "z"},
		"window":   {"new"},
		"other":    {"anything"},
	} {
		if got := c.tagsOf(repo); !slices.Equal(got, tags) {
			t.Errorf("tags of %s = %v, want %v", repo, got, tags)
		}
	}
	if resp, _ := c.do("GET", "/v2/window/manifests/"+oldWindow.digest, nil, nil); resp.StatusCode != 404 {
		t.Errorf("the untagged manifest of window:old answers %d", resp.StatusCode)
	}
	if again, err := reg.Collect(ctx, registry.CollectOptions{}); err != nil || len(again.Deleted) != 0 {
		t.Errorf("a second Collect = %v, %v; want nothing", names(again), err)
	}

	// Immutable tags: not moved, not deleted; the same manifest again and
	// a new immutable tag are fine.
	other := c.pushImage("keep/app", "v2", base, "another image")
	resp, body := c.do("PUT", "/v2/keep/app/manifests/release-1", map[string]string{"Content-Type": imageMT}, []byte(other.manifest))
	wantError(t, "a push over an immutable tag", resp, body, 403, "DENIED")
	resp, body = c.do("PUT", "/v2/keep/app/manifests/"+other.digest+"?tag=release-1", map[string]string{"Content-Type": imageMT}, []byte(other.manifest))
	wantError(t, "a push by digest tagging an immutable tag", resp, body, 403, "DENIED")
	c.putManifest("keep/app", "release-1", imageMT, release.manifest)
	c.putManifest("keep/app", "release-2", imageMT, other.manifest)
	resp, body = c.do("DELETE", "/v2/keep/app/manifests/release-1", nil, nil)
	wantError(t, "DELETE of an immutable tag", resp, body, 403, "DENIED")
	resp, body = c.do("DELETE", "/v2/keep/app/manifests/"+release.digest, nil, nil)
	wantError(t, "DELETE of a manifest an immutable tag names", resp, body, 403, "DENIED")
	resp, body = c.do("GET", "/v2/keep/app/manifests/release-1", nil, nil)
	if resp.StatusCode != 200 || string(body) != release.manifest {
		t.Fatalf("release-1 after the refusals = %d %.100s", resp.StatusCode, body)
	}
	// Elsewhere the same tag name is mutable.
	c.pushImage("recent", "release-1", base, "r1")
	c.pushImage("recent", "release-1", base, "r2")
}
