package httprange_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead/internal/httprange"
)

// FuzzCheck checks that no Range header panics and that what
// Check passes on is a header ServeContent answers sanely: 200, 206
// within the value, or 416.
func FuzzCheck(f *testing.F) {
	for _, seed := range []string{"bytes=0-3", "bytes=-0", "bytes=-0,0-1", "bytes=99999999999-", "bytes=-5", "bytes=1-0", "bytes=,,,", "bytes=0-1,2-3,4-5", "items=0-1", "bytes=--1", "bytes=-00"} {
		f.Add(seed)
	}
	value := strings.Repeat("0123456789", 3)
	f.Fuzz(func(t *testing.T, header string) {
		verdict, ranges := httprange.Check(header)
		if verdict != httprange.Serve {
			return
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Range", ranges)
		w := httptest.NewRecorder()
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(value))
		switch w.Code {
		case 200, 416:
		case 206:
			if cr := w.Header().Get("Content-Range"); cr != "" && strings.Contains(cr, "*/") {
				t.Fatalf("206 with Content-Range %q for Range %q", cr, header)
			}
			if w.Body.Len() == 0 {
				t.Fatalf("206 with an empty body for Range %q (passed on as %q)", header, ranges)
			}
		default:
			t.Fatalf("Range %q: status %d", header, w.Code)
		}
	})
}

func TestCheck(t *testing.T) {
	t.Parallel()
	many := strings.Repeat("0-0,", httprange.MaxRanges) + "1-1"
	for _, tc := range []struct {
		header, passed string
		verdict        httprange.Verdict
	}{
		{"", "", httprange.Serve},
		{"bytes=0-3", "bytes=0-3", httprange.Serve},
		{"bytes=-0", "", httprange.Unsatisfiable},
		{"bytes=-000, -0", "", httprange.Unsatisfiable},
		{"bytes=-0,0-1", "bytes=0-1", httprange.Serve},
		{"bytes=" + many, "", httprange.Ignored},
		{"items=0-1", "items=0-1", httprange.Serve},
	} {
		if verdict, passed := httprange.Check(tc.header); verdict != tc.verdict || passed != tc.passed {
			t.Errorf("Check(%q) = %v, %q; want %v, %q", tc.header, verdict, passed, tc.verdict, tc.passed)
		}
	}
}

// TestEmptyContentRange: an empty value has no range to send (RFC 9110
// 14.1.2): a Range of it is answered 200 with the (empty) value, never a
// 206 with Content-Range "bytes 0--1/0".
func TestEmptyContentRange(t *testing.T) {
	t.Parallel()
	for _, rng := range []string{"bytes=-5", "bytes=0-", "bytes=0-0", "bytes=-1,0-"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Range", rng)
		w := httptest.NewRecorder()
		httprange.ServeContent(w, r, httprange.NewSizeOnly(0), func(w http.ResponseWriter) { w.WriteHeader(http.StatusRequestedRangeNotSatisfiable) })
		if w.Code != http.StatusOK || w.Header().Get("Content-Range") != "" {
			t.Errorf("Range %s of an empty value = %d, Content-Range %q; want 200 and none", rng, w.Code, w.Header().Get("Content-Range"))
		}
	}
}
