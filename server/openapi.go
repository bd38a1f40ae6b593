package server

import (
	_ "embed"
	"net/http"
	"strconv"
)

// openAPI is the API's OpenAPI 3.1 description, written by hand. The tests
// check it against the OpenAPI 3.1 meta-schema and every response they
// receive against it.
//
//go:embed openapi.json
var openAPI []byte

// OpenAPI returns the API's OpenAPI 3.1 description.
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }

// serveOpenAPI answers GET /api/v1/openapi.json.
func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(openAPI)))
	w.WriteHeader(http.StatusOK)
	w.Write(openAPI)
}
