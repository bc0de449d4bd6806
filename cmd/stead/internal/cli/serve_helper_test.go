package cli

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
)

// serving is a `stead serve` run in process by startServe.
type serving struct {
	// lines are what it printed, up to the line it was ready at.
	lines []string
	stop  func() (code int, stderr string)
}

// startServe runs the CLI with args (a serve command on 127.0.0.1:0)
// until the test ends, reading what it prints until ready accepts a line
// (nil: the first naming an http:// address); the rest is discarded.
// stop cancels it and returns its exit code and standard error.
func startServe(t *testing.T, ready func(line string) bool, args ...string) *serving {
	t.Helper()
	if ready == nil {
		ready = func(line string) bool { return strings.Contains(line, "http://") }
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr bytes.Buffer
	var wg sync.WaitGroup
	code := -1
	wg.Go(func() {
		code = Run(ctx, args, pw, &stderr)
		pw.Close()
	})
	s := &serving{stop: func() (int, string) {
		cancel()
		wg.Wait()
		return code, stderr.String()
	}}
	t.Cleanup(func() { s.stop() })
	rd := bufio.NewReader(pr)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			_, e := s.stop()
			t.Fatalf("stead %s printed no address: %v; stderr %q", strings.Join(args, " "), err, e)
		}
		s.lines = append(s.lines, strings.TrimSpace(line))
		if ready(line) {
			break
		}
	}
	go io.Copy(io.Discard, rd)
	return s
}

// url returns the first address of scheme ("http://", "grpc://") the
// server printed, without the scheme when it is not http://.
func (s *serving) url(t *testing.T, scheme string) string {
	t.Helper()
	for _, line := range s.lines {
		if i := strings.Index(line, scheme); i >= 0 {
			if scheme == "http://" {
				return line[i:]
			}
			return line[i+len(scheme):]
		}
	}
	t.Fatalf("serve printed no %s address: %q", scheme, s.lines)
	return ""
}
