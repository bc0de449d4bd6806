package server

// Authorized reports whether an Authorization header carries the
// credentials the server asks of /v1 and its mounts (any header when it
// asks none), for a listener beside it that checks the same: the build
// cache's gRPC port.
func (s *Server) Authorized(header string) bool {
	return s.opts.Token == "" || s.authorized(header)
}
