package server

import "net/http"

// Authorized checks a caller of a listener beside the server against the
// server's identities and rules, as its routes do: header is the
// Authorization header sent ("" for none), addr the caller's address (for
// the failed-login limit), and the caller must be allowed action on area
// (for the build cache's gRPC port: "cache", access.Read or
// access.Write). The errors are package access's.
func (s *Server) Authorized(header, addr, area, action string) error {
	if s.access.Open() {
		return nil
	}
	r := &http.Request{Header: http.Header{}, RemoteAddr: addr}
	if header != "" {
		r.Header.Set("Authorization", header)
	}
	_, err := s.check(r, area, action)
	return err
}
