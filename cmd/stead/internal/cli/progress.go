package cli

import (
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// bar is a progress display on the terminal. A nil *bar, which the
// constructors return when stderr is not a terminal, does nothing.
type bar struct {
	pb *progressbar.ProgressBar
}

// bytesBar returns a bar over total bytes (-1: unknown, a spinner),
// showing the bytes done and the total, the rate and the time left.
func (e *env) bytesBar(what string, total int64) *bar {
	return e.bar(what, total, progressbar.OptionShowBytes(true), progressbar.OptionShowCount())
}

// countBar returns a bar over total items named unit.
func (e *env) countBar(what string, total int64, unit string) *bar {
	return e.bar(what, total, progressbar.OptionShowCount(), progressbar.OptionShowIts(), progressbar.OptionSetItsString(unit))
}

// timeBar returns a bar over a run of d, counted in milliseconds.
func (e *env) timeBar(what string, d time.Duration) *bar {
	return e.bar(what, d.Milliseconds())
}

// spinner returns a spinner, for work of unknown length, turning until
// done.
func (e *env) spinner(what string) *bar {
	return e.bar(what, -1)
}

func (e *env) bar(what string, total int64, opts ...progressbar.Option) *bar {
	if e.tty == nil {
		return nil
	}
	opts = append([]progressbar.Option{
		progressbar.OptionSetWriter(e.tty),
		progressbar.OptionSetDescription(what),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionUseANSICodes(true),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionThrottle(100 * time.Millisecond),
	}, opts...)
	if total < 0 {
		// A spinner is drawn at once, before its ticking goroutine
		// starts: that goroutine reads the start time without the bar's
		// lock, so it must be set first. (A bar is drawn when first
		// counted.)
		opts = append(opts, progressbar.OptionSetRenderBlankState(true))
	}
	return &bar{pb: progressbar.NewOptions64(total, opts...)}
}

// reader returns r counting what is read through it on b.
func (b *bar) reader(r io.Reader) io.Reader {
	if b == nil {
		return r
	}
	rd := progressbar.NewReader(r, b.pb)
	return &rd
}

// writer returns a writer that counts what is written to it on b and
// discards it.
func (b *bar) writer() io.Writer {
	if b == nil {
		return io.Discard
	}
	return b.pb
}

// add counts n more units done.
func (b *bar) add(n int64) {
	if b != nil {
		_ = b.pb.Add64(n)
	}
}

// set sets the units done to n.
func (b *bar) set(n int64) {
	if b != nil {
		_ = b.pb.Set64(n)
	}
}

// describe sets the text before the bar.
func (b *bar) describe(what string) {
	if b != nil {
		b.pb.Describe(what)
	}
}

// clear erases the display until it is next drawn, so that a line can be
// printed on the terminal.
func (b *bar) clear() {
	if b != nil {
		_ = b.pb.Clear()
	}
}

// done erases the display, leaving the cursor at the start of an empty
// line; calling it again does nothing.
func (b *bar) done() {
	if b != nil {
		_ = b.pb.Finish()
	}
}

// terminal returns w if it is a terminal that progress may be drawn on
// (one that erases lines: not TERM=dumb), else nil.
func terminal(w io.Writer) io.Writer {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) && os.Getenv("TERM") != "dumb" {
		return f
	}
	return nil
}
