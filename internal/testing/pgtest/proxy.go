package pgtest

import (
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a database until it is cut: then every
// connection is closed and new ones are refused, as when a database goes
// away. It lets a test take a real database away from a store and give it
// back.
type Proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	cut    bool
	hole   bool // accept and hold new connections, forwarding nothing
}

// Proxied returns d's StoreURL reached through a new Proxy, closed with t.
func (d *DB) Proxied(t testing.TB) (string, *Proxy) {
	t.Helper()
	u, err := url.Parse(d.StoreURL())
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	if !strings.Contains(target, ":") {
		target += ":5432"
	}
	p := NewProxy(t, target)
	u.Host = p.Addr()
	return u.String(), p
}

// NewProxy returns a Proxy to target (host:port) on a loopback port,
// closed with t.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target}
	t.Cleanup(func() {
		p.CutOff()
		ln.Close() // ends the accept loop
	})
	go p.accept()
	return p
}

func (p *Proxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.hole {
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			continue
		}
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go func() { io.Copy(up, c); up.Close() }()
		go func() { io.Copy(c, up); c.Close() }()
	}
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the host:port the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// Blackhole drops the connections open and accepts new ones that never
// answer, as a database host that hangs.
func (p *Proxy) Blackhole() {
	p.CutOff()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hole = true
}

// CutOff closes every connection and refuses new ones until Restore.
func (p *Proxy) CutOff() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
