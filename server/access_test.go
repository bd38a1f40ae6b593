package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bernstein/bernstein/server"
)

// limDo sends a request and returns the response with its body read.
func limDo(t *testing.T, method, u string, header map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultTransport.RoundTrip(req) // no redirects, no cookie jar
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(b)
}

// TestReadToken checks who may see what with a read token: every request
// but MCP's shows it (bearer, cookie, or the page URL that sets the
// cookie), a write may show a live claim token instead, and nothing else
// gets through.
func TestReadToken(t *testing.T) {
	s, _, tokens := limStore(t, "T-1")
	rt := server.NewReadToken()
	if err := server.ValidateReadToken(rt); err != nil {
		t.Fatal(err)
	}
	base := limServe(t, s, server.Options{ReadToken: rt})
	events := base + server.EventsPath + "?task=T-1"
	artifacts := base + "/api/v1/tasks/T-1/artifacts"

	refused := func(what string, res *http.Response, body string) {
		t.Helper()
		if res.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Bearer") ||
			!strings.Contains(body, `"field":"token"`) {
			t.Errorf("%s: %d %q %s", what, res.StatusCode, res.Header.Get("WWW-Authenticate"), body)
		}
	}
	through := func(what string, res *http.Response, body string) {
		t.Helper()
		if res.StatusCode == http.StatusUnauthorized {
			t.Errorf("%s: refused: %s", what, body)
		}
	}
	for _, u := range []string{base + "/", base + "/tasks/T-1", base + "/api/v1/tasks", base + "/api/v1/tasks/T-1"} {
		res, body := limDo(t, "GET", u, nil, "")
		refused("GET "+u+" without the read token", res, body)
		res, body = limDo(t, "GET", u, map[string]string{"Authorization": "Bearer " + tokens["T-1"]}, "")
		refused("GET "+u+" with a claim token", res, body)
		res, body = limDo(t, "GET", u, map[string]string{"Authorization": "Bearer " + rt}, "")
		through("GET "+u+" with the read token", res, body)
		if res.Header.Get("Referrer-Policy") != "no-referrer" {
			t.Errorf("GET %s: Referrer-Policy %q", u, res.Header.Get("Referrer-Policy"))
		}
	}
	res, body := limDo(t, "GET", events, map[string]string{"Authorization": "Bearer bct_garbage"}, "")
	refused("events with a garbage token", res, body)
	res, body = limDo(t, "GET", base+"/?token=brt_wrongwrongwrongwrong", nil, "")
	refused("a page URL with a wrong token", res, body)
	if len(res.Cookies()) != 0 {
		t.Error("a wrong token set a cookie")
	}

	// The printed URL: the page is served and sets the cookie.
	res, body = limDo(t, "GET", server.ReadURL(base, rt), nil, "")
	through("the printed URL", res, body)
	var cookie *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == server.ReadCookie {
			cookie = c
		}
	}
	if cookie == nil || cookie.Value != rt || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/" {
		t.Fatalf("the read cookie: %+v", cookie)
	}
	if u, _ := url.Parse(server.ReadURL(base, rt)); u.Query().Get("token") != rt {
		t.Errorf("ReadURL does not carry the token: %s", server.ReadURL(base, rt))
	}
	// The cookie opens the pages, the API and the event stream.
	withCookie := map[string]string{"Cookie": cookie.String()}
	for _, u := range []string{base + "/tasks/T-1", base + "/api/v1/tasks/T-1"} {
		res, body := limDo(t, "GET", u, withCookie, "")
		through("GET "+u+" with the cookie", res, body)
	}
	req, _ := http.NewRequest("GET", events, nil)
	req.Header.Set("Cookie", cookie.String())
	sres, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if sres.StatusCode != http.StatusOK || sres.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("the event stream with the cookie: %d %s", sres.StatusCode, sres.Header.Get("Content-Type"))
	}
	sres.Body.Close()
	res, body = limDo(t, "GET", base+"/", map[string]string{"Cookie": server.ReadCookie + "=brt_wrongwrongwrongwrong"}, "")
	refused("a wrong cookie", res, body)

	// Writes: a live claim token stands in for the read token; a garbage
	// one does not, nor does nothing.
	post := `{"key":"k","type":"report","body":"x"}`
	res, body = limDo(t, "POST", artifacts, map[string]string{"Content-Type": "application/json"}, post)
	refused("a post without a token", res, body)
	res, body = limDo(t, "POST", artifacts, map[string]string{"Content-Type": "application/json", "Authorization": "Bearer bct_garbage"}, post)
	refused("a post with a garbage token", res, body)
	res, body = limDo(t, "POST", artifacts, map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + tokens["T-1"]}, post)
	through("a post with a live claim token", res, body)

	// MCP keeps its own authentication: a claim token, no read token.
	if st := limMCP(t, base, tokens["T-1"]); st != http.StatusOK {
		t.Errorf("MCP with a claim token and no read token: %d", st)
	}
	if st := limMCP(t, base, rt); st != http.StatusUnauthorized {
		t.Errorf("MCP with the read token: %d", st)
	}
	if st := limMCP(t, base, ""); st != http.StatusUnauthorized {
		t.Errorf("MCP without a token: %d", st)
	}

	for _, bad := range []string{"", "short", "has a space in it, long enough", "tab\tin-it-long-enough-x", "é-non-ascii-long-enough"} {
		if server.ValidateReadToken(bad) == nil {
			t.Errorf("read token %q accepted", bad)
		}
	}
}

// TestCrossOriginWritesRefused checks that a browser on another origin
// cannot drive a write: a post to the API or to /mcp that a browser marks
// cross-site, or whose Origin is another host, is refused 403 whatever
// token it carries; the same post from the same origin, or from a client
// that is not a browser, is not.
func TestCrossOriginWritesRefused(t *testing.T) {
	s, _, tokens := limStore(t, "T-1")
	for _, withReadToken := range []bool{false, true} {
		o := server.Options{}
		if withReadToken {
			o.ReadToken = server.NewReadToken()
		}
		base := limServe(t, s, o)
		host := strings.TrimPrefix(base, "http://")
		auth := "Bearer " + tokens["T-1"]
		artifacts := base + "/api/v1/tasks/T-1/artifacts"
		post := `{"key":"k","type":"report","body":"x"}`
		for _, h := range []map[string]string{
			{"Sec-Fetch-Site": "cross-site"},
			{"Sec-Fetch-Site": "same-site", "Origin": "http://evil.localhost:" + strings.Split(host, ":")[1]},
			{"Origin": "http://evil.example"},
		} {
			h["Authorization"], h["Content-Type"] = auth, "application/json"
			res, body := limDo(t, "POST", artifacts, h, post)
			var e server.APIError
			if res.StatusCode != http.StatusForbidden || res.Header.Get("Content-Type") != "application/json" ||
				json.Unmarshal([]byte(body), &e) != nil || e.Error.Field != "origin" || !strings.Contains(e.Error.Message, "cross-origin") {
				t.Errorf("read token %v: cross-origin API post %v: %d %s, want a JSON error naming origin", withReadToken, h, res.StatusCode, body)
			}
			if st := limMCP(t, base, tokens["T-1"], "Sec-Fetch-Site", h["Sec-Fetch-Site"], "Origin", h["Origin"]); st != http.StatusForbidden {
				t.Errorf("read token %v: cross-origin MCP post %v: %d", withReadToken, h, st)
			}
		}
		for _, h := range []map[string]string{
			{"Sec-Fetch-Site": "same-origin", "Origin": base},
			{"Origin": base},
			{},
		} {
			if st := limMCP(t, base, tokens["T-1"], "Sec-Fetch-Site", h["Sec-Fetch-Site"], "Origin", h["Origin"]); st != http.StatusOK {
				t.Errorf("read token %v: same-origin MCP post %v: %d", withReadToken, h, st)
			}
			h["Authorization"], h["Content-Type"] = auth, "application/json"
			if res, body := limDo(t, "POST", artifacts, h, post); res.StatusCode == http.StatusForbidden || res.StatusCode == http.StatusUnauthorized {
				t.Errorf("read token %v: same-origin API post %v: %d %s", withReadToken, h, res.StatusCode, body)
			}
		}
	}
}

// TestSlowSubscriberDoesNotBlockBus checks that clients that never read
// their event stream hold up neither the bus nor another client: while 20
// of them sit on full sockets, a reading client gets each of 200 events.
func TestSlowSubscriberDoesNotBlockBus(t *testing.T) {
	s, _, tokens := limStore(t, "T-1")
	base := limServe(t, s, server.Options{})
	addr := strings.TrimPrefix(base, "http://")
	d := net.Dialer{Control: smallRcvBuf}
	for range 20 {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", server.EventsPath, addr)
		// ...and never read.
	}
	res, err := http.Get(base + server.EventsPath + "?task=T-1")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	got := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "event: "+server.EventArtifact) {
				got <- sc.Text()
			}
		}
		close(got)
	}()
	start := time.Now()
	for i := range 200 {
		limPost(t, s, "T-1", "agent-0", tokens["T-1"], fmt.Sprintf("k%03d", i), strings.Repeat("# padding\n", 50))
	}
	timeout := time.After(60 * time.Second)
	for n := 0; n < 200; n++ {
		select {
		case _, ok := <-got:
			if !ok {
				t.Fatalf("the reading client's stream ended after %d events", n)
			}
		case <-timeout:
			t.Fatalf("the reading client got %d of 200 events", n)
		}
	}
	t.Logf("200 events reached the reading client in %v with 20 clients not reading", time.Since(start).Round(time.Millisecond))
}

// smallRcvBuf gives a client socket a 4 KiB receive buffer, so a server
// writing to a client that does not read blocks soon.
func smallRcvBuf(_, _ string, rc syscall.RawConn) error {
	return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
}
