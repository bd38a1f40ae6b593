package server

import (
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode"

	"github.com/bernstein/bernstein"
)

// Who may see what (docs/http.md, Security). On loopback, reads are open and
// writes need a claim token. With a read token (which --allow-remote
// requires), every request but MCP's must also show the read token, in one
// of three ways:
//   - 'Authorization: Bearer <read token>' (API clients);
//   - the cookie ReadCookie, which a page request carrying '?token=<read
//     token>' sets (HttpOnly, SameSite=Strict), so that the pages, their
//     links and their event stream carry it without the token in any URL
//     but the first;
//   - for a write (a POST to the API), its 'Authorization: Bearer <claim
//     token>' stands in for the read token when it is a live claim token:
//     the claim token is the stronger credential, and the handler still
//     checks it against the task it writes to.
// MCP (/mcp) keeps its own bearer claim token authentication.

// ReadCookie is the cookie a page keeps the read token in.
const ReadCookie = "bernstein_read"

// ReadTokenPrefix starts every read token serve generates.
const ReadTokenPrefix = "brt_"

// NewReadToken generates a read token.
func NewReadToken() string {
	return ReadTokenPrefix + rand.Text() + rand.Text()
}

// ValidateReadToken checks a read token given by the operator: 16 to 256
// printable characters without spaces.
func ValidateReadToken(t string) error {
	if len(t) < 16 || len(t) > 256 {
		return fmt.Errorf("a read token is 16 to 256 characters long (this one has %d)", len(t))
	}
	if strings.IndexFunc(t, func(r rune) bool { return r > unicode.MaxASCII || !unicode.IsPrint(r) || r == ' ' }) >= 0 {
		return errors.New("a read token is printable ASCII without spaces")
	}
	return nil
}

// ReadURL is the URL of the page at base that carries the read token.
func ReadURL(base, token string) string {
	if token == "" {
		return base + "/"
	}
	return base + "/?token=" + url.QueryEscape(token)
}

// readGate requires the read token of every request but MCP's.
type readGate struct {
	token []byte
	store *bernstein.Store
	next  http.Handler
}

func (g *readGate) is(s string) bool {
	return s != "" && subtle.ConstantTimeCompare([]byte(s), g.token) == 1
}

func (g *readGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == MCPPath {
		g.next.ServeHTTP(w, r)
		return
	}
	// The token must not leak through a Referer header from a page.
	w.Header().Set("Referrer-Policy", "no-referrer")
	if bearer, ok := bearerOf(r); ok {
		if g.is(bearer) {
			g.next.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if _, err := g.store.ClaimByToken(bearer); err == nil {
				g.next.ServeHTTP(w, r)
				return
			}
		}
		g.refuse(w, "the bearer token is neither the read token nor, for a write, a live claim token")
		return
	}
	if t := r.URL.Query().Get("token"); t != "" {
		if !g.is(t) {
			g.refuse(w, "the token in the URL is not the read token")
			return
		}
		http.SetCookie(w, &http.Cookie{Name: ReadCookie, Value: string(g.token), Path: "/",
			HttpOnly: true, SameSite: http.SameSiteStrictMode})
		g.next.ServeHTTP(w, r)
		return
	}
	if c, err := r.Cookie(ReadCookie); err == nil && g.is(c.Value) {
		g.next.ServeHTTP(w, r)
		return
	}
	g.refuse(w, "this server requires its read token: open the URL 'bernstein serve' printed, or send 'Authorization: Bearer <read token>'")
}

func (g *readGate) refuse(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="bernstein"`)
	writeError(w, http.StatusUnauthorized, "token", msg)
}

// bearerOf reads an 'Authorization: Bearer' token.
func bearerOf(r *http.Request) (string, bool) {
	f := strings.Fields(r.Header.Get("Authorization"))
	if len(f) != 2 || !strings.EqualFold(f[0], "bearer") {
		return "", false
	}
	return f[1], true
}
