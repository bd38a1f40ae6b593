package mcpserver

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/bernstein/bernstein"
)

// Over HTTP a caller is the bearer claim token printed by 'task claim': one
// agent on one task. The token is resolved against the live claims on every
// request, so a released or completed claim stops working at once; a
// request without a live claim token is answered 401 (there is no identity
// to record a refusal for).

// MaxRequestBytes bounds an HTTP request body: a 1 MiB payload with the
// worst JSON escaping, and room for the envelope.
const MaxRequestBytes = 8 << 20

type claimKey struct{}

type bearerClaim struct {
	token    string
	claimant *bernstein.Claimant
}

// HTTPHandler serves the tools over streamable HTTP, every request
// authenticated by its bearer claim token. o.Identity is ignored.
func HTTPHandler(store *bernstein.Store, o Options) http.Handler {
	o.Identity = bearerIdentity
	srv := New(store, o)
	stream := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Logger:              o.Logger,
		MaxRequestBodyBytes: MaxRequestBytes,
	})
	// The SDK carries the verified claim to the tool handlers as TokenInfo,
	// and binds each session to the token it was opened with.
	withInfo := auth.RequireBearerToken(func(ctx context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		bc, ok := r.Context().Value(claimKey{}).(bearerClaim)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{
			UserID: string(bernstein.TokenHash(bc.token)),
			Extra:  map[string]any{"agent": bc.claimant.Agent, "task": bc.claimant.Task, "token": bc.token},
		}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(stream)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := bearerToken(r)
		if !ok {
			unauthorized(w, "no bearer claim token: send 'Authorization: Bearer <token>' with the token 'bernstein task claim' printed")
			return
		}
		c, err := store.ClaimByToken(token)
		if err != nil {
			unauthorized(w, "the bearer claim token matches no live claim (released, completed or never issued)")
			return
		}
		ctx := context.WithValue(r.Context(), claimKey{}, bearerClaim{token: token, claimant: c})
		withInfo.ServeHTTP(w, r.WithContext(ctx))
	})
}

func bearerToken(r *http.Request) (string, bool) {
	f := strings.Fields(r.Header.Get("Authorization"))
	if len(f) != 2 || !strings.EqualFold(f[0], "bearer") {
		return "", false
	}
	return f[1], true
}

func unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="bernstein"`)
	http.Error(w, msg, http.StatusUnauthorized)
}

// bearerIdentity reads the caller that HTTPHandler verified for this request.
func bearerIdentity(_ context.Context, req *mcp.CallToolRequest) (Caller, error) {
	if req.Extra == nil || req.Extra.TokenInfo == nil {
		return Caller{}, errors.New("no bearer claim token on this request")
	}
	agent, _ := req.Extra.TokenInfo.Extra["agent"].(string)
	token, _ := req.Extra.TokenInfo.Extra["token"].(string)
	if agent == "" || token == "" {
		return Caller{}, errors.New("no bearer claim token on this request")
	}
	return Caller{Agent: agent, Tokens: []string{token}}, nil
}
