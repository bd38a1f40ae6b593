package server

import "net/http"

// routePages mounts the pages: / (the tasks) and /tasks/{id} (one task).
func (s *Server) routePages(mux *http.ServeMux) {}
