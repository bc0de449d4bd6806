package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// screen is a fake terminal: it applies to a grid of lines what a VT100
// does with the bytes written to it (text overwriting at the cursor, \r,
// \n as CR LF, ESC[K and ESC[2K) and fails the test on any other control
// character or sequence. It keeps every line as it was just before it was
// overwritten or erased, so a test can see what was drawn.
type screen struct {
	t *testing.T

	mu       sync.Mutex
	lines    [][]rune
	row, col int
	pending  []byte   // an incomplete UTF-8 sequence or escape, kept for the next write
	drawn    []string // lines as they were before a \r or an erase
}

func newScreen(t *testing.T) *screen {
	return &screen{t: t, lines: [][]rune{nil}}
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := append(s.pending, p...)
	s.pending = nil
	for len(b) > 0 {
		switch c := b[0]; {
		case c == '\r':
			s.keep()
			s.col = 0
			b = b[1:]
		case c == '\n':
			s.row, s.col = s.row+1, 0
			if s.row == len(s.lines) {
				s.lines = append(s.lines, nil)
			}
			b = b[1:]
		case c == 0x1b:
			n, ok := s.escape(b)
			if !ok {
				s.pending = append(s.pending, b...)
				return len(p), nil
			}
			b = b[n:]
		case c < 0x20 || c == 0x7f:
			s.t.Errorf("screen: control character %q written", c)
			b = b[1:]
		default:
			if !utf8.FullRune(b) {
				s.pending = append(s.pending, b...)
				return len(p), nil
			}
			r, n := utf8.DecodeRune(b)
			line := s.lines[s.row]
			for len(line) <= s.col {
				line = append(line, ' ')
			}
			line[s.col] = r
			s.lines[s.row] = line
			s.col++
			b = b[n:]
		}
	}
	return len(p), nil
}

// escape applies the CSI sequence at the start of b and returns its
// length; ok is false when b holds only part of it.
func (s *screen) escape(b []byte) (n int, ok bool) {
	if len(b) < 2 {
		return 0, false
	}
	if b[1] != '[' {
		s.t.Errorf("screen: escape %q written", b[:2])
		return 2, true
	}
	for i := 2; i < len(b); i++ {
		if b[i] >= 0x40 && b[i] <= 0x7e {
			switch seq := string(b[2 : i+1]); seq {
			case "K", "0K":
				if s.col < len(s.lines[s.row]) {
					s.lines[s.row] = s.lines[s.row][:s.col]
				}
				s.keep()
			case "2K":
				s.keep()
				s.lines[s.row] = nil
			default:
				s.t.Errorf("screen: escape sequence %q written", "ESC["+seq)
			}
			return i + 1, true
		}
	}
	return 0, false
}

// keep records the cursor's line, if it shows anything new.
func (s *screen) keep() {
	line := strings.TrimRight(string(s.lines[s.row]), " ")
	if line != "" && (len(s.drawn) == 0 || s.drawn[len(s.drawn)-1] != line) {
		s.drawn = append(s.drawn, line)
	}
}

// String returns the screen, each line's trailing blanks trimmed.
func (s *screen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.lines))
	for i, l := range s.lines {
		out[i] = strings.TrimRight(string(l), " ")
	}
	return strings.Join(out, "\n")
}

// Drawn returns the lines drawn and then overwritten or erased.
func (s *screen) Drawn() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.drawn...)
}

// runOnTerminal runs the CLI with stderr on scr, a terminal, stdin from
// in, and stdout on stdout, which is scr too when stdout is the terminal.
func runOnTerminal(t *testing.T, scr *screen, in io.Reader, stdout io.Writer, args ...string) int {
	t.Helper()
	return execute(context.Background(), args, &env{stdin: in, stdout: stdout, stderr: scr, tty: scr, stdoutTTY: stdout == io.Writer(scr)})
}

func TestScreen(t *testing.T) {
	t.Parallel()
	scr := newScreen(t)
	for _, w := range []string{"abc", "\rxy", "\n", "⠋ one\x1b[0K", "\r\x1b[2K\r", "done\n", "12", "\x1b", "[K\r"} {
		fmt.Fprint(scr, w)
	}
	if got, want := scr.String(), "xyc\ndone\n12"; got != want {
		t.Errorf("screen = %q, want %q", got, want)
	}
	if got, want := strings.Join(scr.Drawn(), "|"), "abc|⠋ one|12"; got != want {
		t.Errorf("drawn = %q, want %q", got, want)
	}
}
