//go:build linux

package stead_test

import (
	"bufio"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/steadkit/stead"
	"github.com/steadkit/stead/engine/enginetest/testkit"
)

var largeRSSMiB = flag.Int64("large-rss-mib", 128, "size of the value TestLargeRSS puts and gets, in MiB (2048 for the issue's 2 GiB check)")

// maxLargeRSS is the peak resident memory a put or get of any size may
// reach, whatever the value's size: the bound holds for 2 GiB.
const maxLargeRSS = 64 << 10 // KiB

var (
	probeOnce sync.Once
	probePath string
	probeErr  error
)

// largeProbe builds internal/testing/largeprobe once per test process, without the
// race detector, and returns its path.
func largeProbe(t *testing.T) string {
	t.Helper()
	probeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "largeprobe")
		if err != nil {
			probeErr = err
			return
		}
		probePath = filepath.Join(dir, "largeprobe")
		out, err := exec.Command("go", "build", "-o", probePath, "github.com/steadkit/stead/internal/testing/largeprobe").CombinedOutput()
		if err != nil {
			probeErr = fmt.Errorf("go build largeprobe: %v\n%s", err, out)
		}
	})
	if probeErr != nil {
		t.Fatal(probeErr)
	}
	return probePath
}

// runProbe runs the probe to its end and returns what it printed, parsed
// as name=value pairs.
func runProbe(t *testing.T, args ...string) map[string]string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), largeProbe(t), args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("largeprobe %v: %v", args, err)
	}
	fields := map[string]string{}
	for _, f := range strings.Fields(string(out)) {
		name, value, _ := strings.Cut(f, "=")
		fields[name] = value
	}
	return fields
}

// TestLargeKilledPut kills (SIGKILL) a process in the middle of a chunked
// put: its staged chunks stay behind until its upload lease lapses, and
// the next store opened after that reaps them.
func TestLargeKilledPut(t *testing.T) {
	t.Parallel()
	for _, be := range largeBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			url, raw := be.open(t, "")
			before := raw.rows(t)
			// Long enough that the open below, on a loaded machine, comes
			// within it.
			const lease = 5 * time.Second
			cmd := exec.CommandContext(t.Context(), largeProbe(t), "-url", url, "-put-forever", "-lease", lease.String())
			cmd.Stderr = os.Stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil || line != "putting\n" {
				cmd.Process.Kill()
				t.Fatalf("largeprobe -put-forever said %q, %v", line, err)
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
				t.Fatalf("largeprobe after SIGKILL: %v, want killed", err)
			}
			staged := raw.rows(t)
			if staged["blob_uploads"] != 1 || staged["blob_chunks"] < 1 || staged["blobs"] != before["blobs"] {
				t.Fatalf("after the kill: rows %v, want one upload with its chunks and no new blob", staged)
			}
			// Opening a store before the lease lapses keeps the upload:
			// its writer might be alive.
			st, err := stead.Open(t.Context(), url)
			if err != nil {
				t.Fatal(err)
			}
			st.Close()
			if rows := raw.rows(t); rows["blob_uploads"] != 1 {
				t.Fatalf("an open within the lease reaped the upload: rows %v", rows)
			}
			testkit.Until(t, "a store opened after the lease lapsed to reap the killed put's chunks", func() bool {
				st, err := stead.Open(t.Context(), url)
				if err != nil {
					t.Fatal(err)
				}
				st.Close()
				return maps.Equal(withoutPins(raw.rows(t)), withoutPins(before))
			})
		})
	}
}

// TestLargeRSS puts and gets one value in child processes and checks that
// neither's peak resident memory exceeds maxLargeRSS, whatever the size:
// run with -large-rss-mib=2048 for the 2 GiB check.
func TestLargeRSS(t *testing.T) {
	t.Parallel()
	size := *largeRSSMiB << 20
	for _, be := range largeBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			url, _ := be.open(t, "")
			put := runProbe(t, "-url", url, "-put", fmt.Sprint(size))
			get := runProbe(t, "-url", url, "-get", put["key"])
			if get["size"] != fmt.Sprint(size) {
				t.Fatalf("get read %s bytes, want %d", get["size"], size)
			}
			t.Logf("%s, %d MiB: put peak RSS %s KiB, get peak RSS %s KiB", be.name, *largeRSSMiB, put["maxrss_kib"], get["maxrss_kib"])
			for what, fields := range map[string]map[string]string{"put": put, "get": get} {
				var rss int64
				if _, err := fmt.Sscan(fields["maxrss_kib"], &rss); err != nil || rss <= 0 || rss > maxLargeRSS {
					t.Errorf("%s of %d MiB: peak RSS %s KiB, want at most %d", what, *largeRSSMiB, fields["maxrss_kib"], maxLargeRSS)
				}
			}
		})
	}
}
