package server_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/steadkit/stead/server"
)

// writePair writes a self-signed certificate for 127.0.0.1 with serial and
// its key to certFile and keyFile, stamped modified at mtime, and returns
// the certificate.
func writePair(t *testing.T, certFile, keyFile string, serial int64, mtime time.Time) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "stead test"},
		NotBefore: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), NotAfter: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for path, block := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// servedSerial handshakes with the TLS listener at addr, trusting cert,
// and returns the serial number of the certificate it served.
func servedSerial(t *testing.T, addr string, cert *x509.Certificate) int64 {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("TLS handshake trusting serial %v: %v", cert.SerialNumber, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
}

// TestCertFilesReload: the certificate is read again once its files
// change, and a pair that does not load leaves the last good one served.
func TestCertFilesReload(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	stamp := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	first := writePair(t, certFile, keyFile, 1, stamp)
	var logged syncBuffer
	cfg, err := server.CertFiles(certFile, keyFile, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
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
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	addr := ln.Addr().String()
	if got := servedSerial(t, addr, first); got != 1 {
		t.Fatalf("served serial %d, want 1", got)
	}
	second := writePair(t, certFile, keyFile, 2, stamp.Add(time.Hour))
	if got := servedSerial(t, addr, second); got != 2 {
		t.Fatalf("after the files changed, served serial %d, want 2", got)
	}
	if err := os.WriteFile(certFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(certFile, stamp.Add(2*time.Hour), stamp.Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := servedSerial(t, addr, second); got != 2 || !strings.Contains(logged.String(), "not reloaded") {
		t.Fatalf("after a broken certificate file, served serial %d, logged %q; want 2 still and the failure logged", got, logged.String())
	}
	if _, err := server.CertFiles(certFile, keyFile, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil {
		t.Fatal("CertFiles of a broken pair succeeded")
	}
}
