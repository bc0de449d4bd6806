package remote_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead/blob"
	"github.com/steadkit/stead/engine/remote"
	"github.com/steadkit/stead/ref"
	"github.com/steadkit/stead/steaderr"
)

// hostileServer answers /v1/info and then every request with answer.
func hostileServer(t *testing.T, answer string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					if req.URL.Path == "/v1/info" {
						body := `{"cluster":false,"reason":"x"}`
						fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
						continue
					}
					fmt.Fprint(c, answer)
					return
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestGetDistrustsContentLength: a server that declares a huge or a
// too-long body gets an error from Get, which reads no more than a blob
// can hold, whatever the header says.
func TestGetDistrustsContentLength(t *testing.T) {
	t.Parallel()
	for name, answer := range map[string]string{
		"huge declared length": "HTTP/1.1 200 OK\r\nContent-Length: 4000000000000\r\n\r\nhello",
		"endless body":         "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + strings.Repeat(fmt.Sprintf("%x\r\n%s\r\n", 64<<10, strings.Repeat("a", 64<<10)), (blob.InlineLimit>>16)+4),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e, err := remote.Open(ctx, remote.Config{URL: hostileServer(t, answer)})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			key, _ := blob.ParseKey("sha256:" + strings.Repeat("ab", 32))
			if v, err := e.Blobs().Get(ctx, key); err == nil {
				t.Fatalf("Get = %d bytes, want an error", v.Size)
			}
		})
	}
}

// TestListDistrustsOrder: a page out of order, repeating a name, outside
// the prefix asked for, longer than asked, or larger than the blobs asked
// for can take is an error, not a list.
func TestListDistrustsOrder(t *testing.T) {
	t.Parallel()
	json := func(body string) string {
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	k := func(c string) string { return "sha256:" + strings.Repeat(c, 64) }
	refJSON := func(name string) string {
		return fmt.Sprintf(`{"name":%q,"key":%q,"version":1}`, name, k("a"))
	}
	var ordered []string // eleven keys in order, one more than the limit asked for
	for _, c := range "0123456789a" {
		ordered = append(ordered, `{"key":"`+k(string(c))+`","size":1}`)
	}
	eleven := strings.Join(ordered, ",")
	for name, tc := range map[string]struct {
		answer string
		refs   bool
	}{
		"blobs out of order":      {json(`{"blobs":[{"key":"` + k("b") + `","size":1},{"key":"` + k("a") + `","size":1}]}`), false},
		"blobs repeated":          {json(`{"blobs":[{"key":"` + k("b") + `","size":1},{"key":"` + k("b") + `","size":1}]}`), false},
		"blob size negative":      {json(`{"blobs":[{"key":"` + k("b") + `","size":-1}]}`), false},
		"blobs longer than asked": {json(`{"blobs":[` + eleven + `]}`), false},
		"blob page too large":     {json(`{"blobs":[{"key":"` + k("b") + `","size":1}` + strings.Repeat(" ", 1<<20) + `]}`), false},
		"blob page not a page":    {json(`{"blobs":{"key":"` + k("b") + `"}}`), false},
		"blob page cut short":     {json(`{"blobs":[{"key":"` + k("b") + `","size":1}`), false},
		"refs out of order":       {json(`{"refs":[` + refJSON("p/b") + `,` + refJSON("p/a") + `]}`), true},
		"refs outside prefix":     {json(`{"refs":[` + refJSON("q/a") + `]}`), true},
		"refs before after":       {json(`{"refs":[` + refJSON("p/") + `]}`), true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e, err := remote.Open(ctx, remote.Config{URL: hostileServer(t, tc.answer)})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if tc.refs {
				err = e.Refs().List(ctx, ref.ListParams{Prefix: "p/", After: "p/", Limit: 10}, func(ref.Ref) bool { return true })
			} else {
				err = e.Blobs().List(ctx, blob.Key{}, 10, func(blob.Info) bool { return true })
			}
			if err == nil {
				t.Fatal("List succeeded; want a malformed-answer error")
			}
		})
	}
}

// TestObjectFormsDistrusted: a stored form naming an object beside a value
// or a chunk set, or with no size, is an error; so is a range answer that
// is not the range asked for, or shorter than it says.
func TestObjectFormsDistrusted(t *testing.T) {
	t.Parallel()
	json := func(body string) string {
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	ranged := func(contentRange string, length int, body string) string {
		return fmt.Sprintf("HTTP/1.1 206 Partial Content\r\nContent-Range: %s\r\nContent-Length: %d\r\n\r\n%s", contentRange, length, body)
	}
	key, _ := blob.ParseKey("sha256:" + strings.Repeat("ab", 32))
	for name, tc := range map[string]struct {
		answer string
		read   bool // ReadValue of 5 bytes from 10, not Get
	}{
		"object and value":   {answer: json(`{"size":3,"value":"YWJj","object":"o/ab/cd"}`)},
		"object and chunks":  {answer: json(`{"size":3,"chunks":7,"object":"o/ab/cd"}`)},
		"object of no bytes": {answer: json(`{"size":0,"object":"o/ab/cd"}`)},
		"object name huge":   {answer: json(`{"size":3,"object":"` + strings.Repeat("o", 2000) + `"}`)},
		"200 to a range":     {answer: "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", read: true},
		"another range":      {answer: ranged("bytes 0-4/100", 5, "hello"), read: true},
		"a longer range":     {answer: ranged("bytes 10-19/100", 10, "helloworld"), read: true},
		"garbled range":      {answer: ranged("bytes ten/100", 5, "hello"), read: true},
		"broken off":         {answer: ranged("bytes 10-14/100", 5, "he"), read: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e, err := remote.Open(ctx, remote.Config{URL: hostileServer(t, tc.answer)})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if !tc.read {
				if st, err := e.Blobs().Get(ctx, key); err == nil {
					t.Fatalf("Get = %+v, want an error", st)
				}
				return
			}
			rc, err := e.Blobs().ReadValue(ctx, blob.ReadValueParams{Key: key, Object: "o/ab/cd", Off: 10, N: 5})
			if err == nil {
				var got []byte
				got, err = io.ReadAll(rc)
				rc.Close()
				if err == nil {
					t.Fatalf("ReadValue = %q, want an error", got)
				}
				if !errors.Is(err, steaderr.ErrUnavailable) {
					t.Fatalf("reading an answer that broke off: %v, want ErrUnavailable", err)
				}
			}
		})
	}
}

// TestUploadAnswersDistrusted: an upload's answers that do not fit what
// was asked (another id, a size that is not past the append, a state too
// large) and chunk reads that do not hold the byte asked for, or name an
// object with a body, no size or a name too long, are errors.
func TestUploadAnswersDistrusted(t *testing.T) {
	t.Parallel()
	json := func(body string) string {
		return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	}
	chunk := func(headers, body string) string {
		return fmt.Sprintf("HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s", headers, len(body), body)
	}
	const id = "0123456789abcdef"
	set := blob.ChunkSet(0x0123456789abcdef)
	state := `"` + strings.Repeat("A", 2000) + `"`
	for name, tc := range map[string]struct {
		answer string
		call   func(ctx context.Context, b blob.Backend) error
	}{
		"begin: id malformed":   {json(`{"id":"xyz","size":0}`), begin},
		"begin: id zero":        {json(`{"id":"0000000000000000","size":0}`), begin},
		"begin: id upper case":  {json(`{"id":"0123456789ABCDEF","size":0}`), begin},
		"begin: not empty":      {json(`{"id":"` + id + `","size":5}`), begin},
		"status: another id":    {json(`{"id":"0123456789abcdee","size":5,"state":"AA=="}`), status(set)},
		"status: size < 0":      {json(`{"id":"` + id + `","size":-1,"state":"AA=="}`), status(set)},
		"status: no state":      {json(`{"id":"` + id + `","size":5}`), status(set)},
		"status: state huge":    {json(`{"id":"` + id + `","size":5,"state":` + state + `}`), status(set)},
		"append: size short":    {json(`{"id":"` + id + `","size":3}`), writeChunk(set)},
		"append: size long":     {json(`{"id":"` + id + `","size":6}`), writeChunk(set)},
		"append: another id":    {json(`{"id":"0123456789abcdee","size":5}`), writeChunk(set)},
		"append: not past off":  {json(`{"id":"` + id + `","size":10}`), writeValue(set)},
		"append: before off":    {json(`{"id":"` + id + `","size":4}`), writeValue(set)},
		"chunk: start past off": {chunk("Stead-Chunk-Start: 200\r\n", "0123456789"), readChunk},
		"chunk: start < 0":      {chunk("Stead-Chunk-Start: -1\r\n", "0123456789"), readChunk},
		"chunk: empty":          {chunk("Stead-Chunk-Start: 100\r\n", ""), readChunk},
		"object: no size":       {chunk("Stead-Chunk-Start: 0\r\nStead-Chunk-Object: o/ab/cd\r\n", ""), readChunk},
		"object: size 0":        {chunk("Stead-Chunk-Start: 100\r\nStead-Chunk-Size: 0\r\nStead-Chunk-Object: o/ab/cd\r\n", ""), readChunk},
		"object: no name":       {chunk("Stead-Chunk-Start: 0\r\nStead-Chunk-Size: 500\r\n", ""), readChunk},
		"object: name huge":     {chunk("Stead-Chunk-Start: 0\r\nStead-Chunk-Size: 500\r\nStead-Chunk-Object: "+strings.Repeat("o", 2000)+"\r\n", ""), readChunk},
		"object: with a body":   {chunk("Stead-Chunk-Start: 0\r\nStead-Chunk-Size: 500\r\nStead-Chunk-Object: o/ab/cd\r\n", "bytes"), readChunk},
		"object: size overflow": {chunk("Stead-Chunk-Start: 50\r\nStead-Chunk-Size: 9223372036854775807\r\nStead-Chunk-Object: o/ab/cd\r\n", ""), readChunkFar},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e, err := remote.Open(ctx, remote.Config{URL: hostileServer(t, tc.answer)})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if err := tc.call(ctx, e.Blobs()); err == nil {
				t.Fatal("the call succeeded; want a malformed-answer error")
			}
		})
	}
}

func begin(ctx context.Context, b blob.Backend) error {
	_, err := b.BeginUpload(ctx, blob.BeginUploadParams{Lease: time.Minute})
	return err
}

func status(set blob.ChunkSet) func(context.Context, blob.Backend) error {
	return func(ctx context.Context, b blob.Backend) error {
		_, err := b.UploadStatus(ctx, set)
		return err
	}
}

func writeChunk(set blob.ChunkSet) func(context.Context, blob.Backend) error {
	return func(ctx context.Context, b blob.Backend) error {
		return b.WriteChunk(ctx, blob.WriteChunkParams{Set: set, Data: []byte("hello"), Lease: time.Minute})
	}
}

func writeValue(set blob.ChunkSet) func(context.Context, blob.Backend) error {
	return func(ctx context.Context, b blob.Backend) error {
		_, err := b.WriteValue(ctx, blob.WriteValueParams{Set: set, Off: 10, Value: strings.NewReader("hello"), Lease: time.Minute})
		return err
	}
}

func readChunk(ctx context.Context, b blob.Backend) error {
	_, err := b.ReadChunk(ctx, 7, 100)
	return err
}

// readChunkFar reads the chunk holding byte MaxInt64-1, whose object's
// start plus size overflows.
func readChunkFar(ctx context.Context, b blob.Backend) error {
	_, err := b.ReadChunk(ctx, 7, math.MaxInt64-1)
	return err
}
