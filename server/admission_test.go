package server_test

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
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

// TestConnectionCapPerClient: one client address gets at most
// MaxConnsPerClient connections; its next is closed at once, and another
// address is still served.
func TestConnectionCapPerClient(t *testing.T) {
	t.Parallel()
	addr, _ := serveReal(t, server.Options{MaxConns: 8, MaxConnsPerClient: 2})
	dialFrom(t, "127.0.0.2", addr)
	dialFrom(t, "127.0.0.2", addr)
	third := dialFrom(t, "127.0.0.2", addr)
	// Well before the 10s header timeout would close it anyway.
	third.SetDeadline(time.Now().Add(2 * time.Second))
	wantClosed(t, third)
	resp, err := clientFrom("127.0.0.3").Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("another address: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("another address: %d", resp.StatusCode)
	}
}

var (
	soak     = flag.Duration("server.soak", 0, "run TestAdmissionSoak for this long (e.g. 50s); 0 skips it")
	soakAddr = flag.String("server.soak.addr", "", "the loopback host:port of a stead serve for TestAdmissionSoak to load instead of its own server")
)

// TestAdmissionSoak is a measurement, not a check of time: for -server.soak,
// one client address keeps 1,000 idle connections and 100 uploads sending
// a byte a second (reconnecting whatever the server closes), while three
// other addresses put 64 KiB blobs four at a time, a connection each,
// with the default limits. It logs what the real clients got; it fails only when they got
// no success at all.
func TestAdmissionSoak(t *testing.T) {
	if *soak == 0 {
		t.Skip("a soak: run with -server.soak=50s")
	}
	addr := *soakAddr
	if addr == "" {
		addr, _ = serveReal(t, server.Options{})
	}
	ctx, stop := context.WithTimeout(t.Context(), *soak)
	defer stop()
	var wg sync.WaitGroup
	attacker := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	for i := range 1100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				c, err := attacker.DialContext(ctx, "tcp", addr)
				if err != nil {
					select {
					case <-ctx.Done():
					case <-time.After(10 * time.Millisecond):
					}
					continue
				}
				if i >= 1000 { // a slow upload
					fmt.Fprintf(c, "PUT /v1/blobs HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n")
					for ctx.Err() == nil {
						if _, err := c.Write([]byte{'x'}); err != nil {
							break
						}
						select {
						case <-ctx.Done():
						case <-time.After(time.Second):
						}
					}
				} else { // idle: wait for the server to close it
					go func() { <-ctx.Done(); c.Close() }()
					io.Copy(io.Discard, c)
				}
				c.Close()
			}
		}()
	}
	var (
		mu        sync.Mutex
		latencies []time.Duration
		statuses  = map[int]int{}
		failures  int
		firstErr  error
	)
	for _, from := range []string{"127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		client := clientFrom(from)
		// A connection per put, as curl makes them.
		client.Transport.(*http.Transport).DisableKeepAlives = true
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				value := make([]byte, 64<<10)
				for ctx.Err() == nil {
					crand.Read(value)
					start := time.Now()
					req, _ := http.NewRequestWithContext(ctx, "PUT", "http://"+addr+"/v1/blobs", bytes.NewReader(value))
					resp, err := client.Do(req)
					d := time.Since(start)
					mu.Lock()
					if err != nil {
						if ctx.Err() == nil {
							failures++
							if firstErr == nil {
								firstErr = err
							}
						}
					} else {
						statuses[resp.StatusCode]++
						latencies = append(latencies, d)
					}
					mu.Unlock()
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
			}()
		}
	}
	wg.Wait()
	slices.Sort(latencies)
	pct := func(p float64) time.Duration {
		if len(latencies) == 0 {
			return 0
		}
		return latencies[int(p*float64(len(latencies)-1))]
	}
	total := failures
	for _, n := range statuses {
		total += n
	}
	t.Logf("real clients over %v: %d puts, statuses %v, %d transport errors (first: %v); latency p50 %v, p99 %v, max %v; share stored %.1f%%",
		*soak, total, statuses, failures, firstErr, pct(0.5), pct(0.99), pct(1), 100*float64(statuses[http.StatusCreated])/float64(max(total, 1)))
	if statuses[http.StatusCreated] == 0 {
		t.Fatal("the real clients stored nothing")
	}
}
