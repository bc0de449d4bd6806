package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/steadkit/stead/internal/testing/fronttest"
	"github.com/steadkit/stead/record"
	"github.com/steadkit/stead/ref"
)

// TestConsoleBrowser drives the console in Debian's Chromium (one start
// for every subtest): each page loads without a console error or a
// failed request, shows the repository just pushed, a layer's explain
// graph names the manifest that keeps it, and the retention dry run lists
// the tag no rule keeps, the records page a group's claimable and leased
// records, the locks page a held lock. With STEAD_CONSOLE_SCREENSHOTS=DIR it writes
// the main pages' screenshots there (docs/images/console-*.png).
func TestConsoleBrowser(t *testing.T) {
	chromium := fronttest.Tool(t, "chromium", "STEAD_CHROMIUM", "STEAD_REQUIRE_CHROMIUM")
	f := newConsoleFixture(t, consoleToken)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(t.Context(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()

	var mu sync.Mutex
	var problems []string
	err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				problems = append(problems, "console error")
			}
		case *cdplog.EventEntryAdded: // CSP violations, failed resources
			if e.Entry.Level == cdplog.EntryLevelError {
				problems = append(problems, "logged: "+e.Entry.Text)
			}
		case *runtime.EventExceptionThrown:
			problems = append(problems, "exception: "+e.ExceptionDetails.Text)
		case *network.EventLoadingFailed:
			problems = append(problems, "request failed: "+e.ErrorText)
		case *network.EventResponseReceived:
			if e.Response.Status >= 400 {
				problems = append(problems, "answered "+e.Response.StatusText+": "+e.Response.URL)
			}
		}
	})
	if err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	// The token rides every request, as a login would.
	if _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": "Bearer " + consoleToken}}); err != nil {
		t.Fatalf("set the login header: %v", err)
	}
	// Sweeps between pushes, so the collection chart has a line that
	// rises with what the store holds.
	f.sweep(t)
	for i := 1; i <= 3; i++ {
		key, err := f.st.Blobs.Put(t.Context(), bytes.NewReader(bytes.Repeat([]byte{byte(i)}, i*2048)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.st.Refs.Set(t.Context(), fmt.Sprintf("demo/%d", i), key, ref.SetOptions{}); err != nil {
			t.Fatal(err)
		}
		f.sweep(t)
	}
	if err := f.st.Records.RegisterGroup(t.Context(), "workers"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"job-1", "job-2"} {
		if _, err := f.st.Records.Save(t.Context(), record.Record{ID: id, Group: "workers", Status: record.Active, Payload: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.st.Records.Claim(t.Context(), "workers", "job-2", "worker-1", time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := f.st.Locks.TryLock(t.Context(), "reindex/team-app", "node-7", time.Hour); err != nil || !ok {
		t.Fatalf("TryLock = %v, %v", ok, err)
	}
	shots := os.Getenv("STEAD_CONSOLE_SCREENSHOTS")
	for _, c := range []struct {
		name, path, sel string
		want            []string
	}{
		{"home", "/ui/", "#repositories", []string{"team/app"}},
		{"repository", "/ui/repository?name=team/app", "#tags", []string{"v1", "scratch", f.manifest}},
		{"explain", "/ui/keys/" + f.layer, "#graph", []string{f.manifest[:23], "parent blob", "oci/team/app/_blobs/"}},
		{"retention", "/ui/retention", "#deletions", []string{"scratch", "no retention rule keeps the tag"}},
		{"gc", "/ui/gc", "#chart-stored", []string{"Collection", "Stored bytes", "garbage pending", "in 6 blobs"}},
		{"records", "/ui/records?group=workers", "#leased", []string{"job-1", "1 claimable", "job-2", "worker-1", "1 leased"}},
		{"locks", "/ui/locks", "#locks", []string{"reindex/team-app", "node-7"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			mu.Lock()
			problems = nil
			mu.Unlock()
			if err := chromedp.Do(ctx, chromedp.Navigate(f.base+c.path), chromedp.WaitVisible(c.sel)); err != nil {
				t.Fatalf("load %s: %v", c.path, err)
			}
			text, err := chromedp.Run(ctx, chromedp.TextContent("body"))
			if err != nil {
				t.Fatalf("read %s: %v", c.path, err)
			}
			var png []byte
			if shots != "" {
				if png, err = chromedp.Run(ctx, chromedp.FullScreenshot(100)); err != nil {
					t.Fatalf("screenshot %s: %v", c.path, err)
				}
			}
			for _, w := range c.want {
				if !strings.Contains(text, w) {
					t.Errorf("%s shows no %q: %.1500s", c.path, w, text)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(problems) > 0 {
				t.Errorf("%s: %s", c.path, strings.Join(problems, "; "))
			}
			if shots != "" {
				if err := os.WriteFile(filepath.Join(shots, "console-"+c.name+".png"), png, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
