package witnesstest_test

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"

	"github.com/bernstein/bernstein/internal/witnesstest"
)

// The harness serves litewitness on loopback with the key it printed, and
// Stop ends it.
func TestStartServesAndStops(t *testing.T) {
	w := witnesstest.Start(t)
	if !strings.HasPrefix(w.VerifierKey(), witnesstest.Name+"+") {
		t.Fatalf("verifier key %q is not named %s", w.VerifierKey(), witnesstest.Name)
	}
	resp, err := http.Get(w.URL() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /: %s", resp.Status)
	}
	u, _ := url.Parse(w.URL())
	w.Stop()
	_, err = net.Dial("tcp", u.Host)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("after Stop, dialing %s: %v, want connection refused", u.Host, err)
	}
}
