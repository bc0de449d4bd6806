package server_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/steadkit/stead/server"
)

// dialFrom opens a raw connection to addr from the loopback address from
// (127.0.0.2, ...: Linux routes all of 127.0.0.0/8 to lo), so that one
// test plays several clients.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Skipf("cannot dial from %s (needs 127.0.0.0/8 on lo): %v", from, err)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

// clientFrom returns an HTTP client whose connections come from the
// loopback address from.
func clientFrom(from string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	t := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}}
	return &http.Client{Transport: t, Timeout: 20 * time.Second}
}

// stallUpload sends an upload's headers and two bytes of its ten from
// the address from, and leaves it stalled.
func stallUpload(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	c := dialFrom(t, from, addr)
	fmt.Fprintf(c, "PUT /v1/blobs HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab")
	return c
}

// TestRefusalReadsNoBody: with every upload slot held, an upload whose
// body stalls is answered 503 busy at once; net/http would otherwise read
// (and wait for) its body before answering.
func TestRefusalReadsNoBody(t *testing.T) {
	t.Parallel()
	addr, _ := serveReal(t, server.Options{MaxUploads: 1, BodyGrace: time.Minute})
	stallUpload(t, "127.0.0.1", addr)
	metricsSay(t, addr, "stead_http_uploads_in_progress 1")
	status, body := readAnswer(t, stallUpload(t, "127.0.0.3", addr))
	if status != http.StatusServiceUnavailable || !strings.Contains(body, `"code":"busy"`) {
		t.Fatalf("an upload past the cap = %d %s, want 503 busy", status, body)
	}
}

// TestDeclaredLengthOverLimit: a record save declaring a body over the
// limit is refused 413 at once, without a slot: with every slot held it
// is still 413, and the saves that declare it never hold one.
func TestDeclaredLengthOverLimit(t *testing.T) {
	t.Parallel()
	addr, _ := serveReal(t, server.Options{MaxUploads: 1, BodyGrace: time.Minute})
	stallUpload(t, "127.0.0.1", addr)
	metricsSay(t, addr, "stead_http_uploads_in_progress 1")
	for _, req := range []string{
		"PUT /v1/records/huge HTTP/1.1\r\nIf-None-Match: *\r\n",
		"POST /v1/locks/l/acquire HTTP/1.1\r\n",
	} {
		c := dialFrom(t, "127.0.0.3", addr)
		fmt.Fprintf(c, "%sHost: x\r\nContent-Type: application/json\r\nContent-Length: 1099511627776\r\n\r\n{", req)
		status, body := readAnswer(t, c)
		if status != http.StatusRequestEntityTooLarge || !strings.Contains(body, `"code":"body_too_large"`) {
			t.Errorf("%q declaring 1 TiB = %d %s, want 413 body_too_large", req, status, body)
		}
	}
}

// TestUploadFairShare: one client address that holds stalled uploads
// (reconnecting as fast as it is refused) gets at most MaxUploadsPerClient
// slots, so clients at other addresses keep the rest: with 8 slots and 2
// per client, every one of 60 puts from three other addresses succeeds
// (share 100%) while the misbehaving client holds its 2 and its other
// uploads wait. Without the per-client bound it takes all 8 and the puts
// are refused.
func TestUploadFairShare(t *testing.T) {
	t.Parallel()
	addr, _ := serveReal(t, server.Options{MaxUploads: 8, MaxUploadsPerClient: 2, BodyGrace: time.Minute})
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var refusedMu sync.Mutex
	refused := 0
	// The misbehaving client: 20 connections, each stalling an upload and
	// reconnecting when refused.
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
				c, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					return
				}
				fmt.Fprintf(c, "PUT /v1/blobs HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nab")
				buf := make([]byte, 512)
				c.SetReadDeadline(time.Now().Add(time.Second))
				n, _ := c.Read(buf)
				if n > 0 {
					refusedMu.Lock()
					refused++
					refusedMu.Unlock()
					c.Close()
					continue
				}
				<-ctx.Done() // holding a slot: stall until the test ends
				c.Close()
				return
			}
		}()
	}
	t.Cleanup(func() { stop(); wg.Wait() })
	metricsSay(t, addr, "stead_http_uploads_in_progress 2")
	var ok, busy int
	var mu sync.Mutex
	var puts sync.WaitGroup
	for i, from := range []string{"127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		client := clientFrom(from)
		puts.Add(1)
		go func() {
			defer puts.Done()
			for j := range 20 {
				resp, err := client.Post("http://"+addr+"/v1/blobs", "application/octet-stream", strings.NewReader(fmt.Sprint("real ", i, j)))
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				mu.Lock()
				if resp.StatusCode == http.StatusCreated {
					ok++
				} else {
					busy++
				}
				mu.Unlock()
			}
		}()
	}
	puts.Wait()
	if ok != 60 {
		t.Fatalf("real clients: %d of 60 puts stored, %d refused, while one client misbehaves; want all 60", ok, busy)
	}
}
