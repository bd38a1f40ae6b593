package server

import "net/http"

// routeAPI mounts the task API under /api/v1 (docs/http.md).
func (s *Server) routeAPI(mux *http.ServeMux) {}
