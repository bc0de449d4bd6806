package server

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
)

// CertFiles returns a TLS configuration serving the certificate and key in
// the PEM files certFile and keyFile. They are read again at the first
// handshake after either file's modification time or size changed, so a
// renewed certificate is served without a restart; a pair that no longer
// loads leaves the last good one served, and is reported to log. The
// first read must succeed.
func CertFiles(certFile, keyFile string, log *slog.Logger) (*tls.Config, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	if err := r.reload(); err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}, nil
}

// certReloader holds the pair last read and the files' stamps then.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger
	mu                sync.Mutex
	cert              *tls.Certificate
	stamps            [2]fileStamp
}

// fileStamp is what tells that a file changed.
type fileStamp struct {
	mtime int64 // in nanoseconds since the epoch
	size  int64
}

func (r *certReloader) stamp() [2]fileStamp {
	var out [2]fileStamp
	for i, path := range []string{r.certFile, r.keyFile} {
		if fi, err := os.Stat(path); err == nil {
			out[i] = fileStamp{fi.ModTime().UnixNano(), fi.Size()}
		}
	}
	return out
}

// reload reads the pair, recording the stamps it was read at.
func (r *certReloader) reload() error {
	r.stamps = r.stamp()
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("TLS certificate %s, key %s: %w", r.certFile, r.keyFile, err)
	}
	r.cert = &cert
	return nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stamp() != r.stamps {
		if err := r.reload(); err != nil {
			r.log.Error("stead: TLS certificate not reloaded; serving the last good one", "err", err)
		} else {
			r.log.Info("stead: TLS certificate reloaded", "cert", r.certFile)
		}
	}
	return r.cert, nil
}
