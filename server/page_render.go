package server

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/microcosm-cc/bluemonday"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"

	"github.com/bernstein/bernstein/artifact"
)

//go:embed web
var webFS embed.FS

// templates are the page sets: each page is base.html and partials.html
// with its own "main". They are parsed on first use, not at process start:
// every CLI command links this package (for serve) and would otherwise pay
// for parsing them.
var templates = sync.OnceValue(func() map[string]*template.Template {
	out := map[string]*template.Template{}
	for _, name := range []string{"tasks", "task", "version", "diff", "problem"} {
		t := template.New(name).Funcs(template.FuncMap{
			"asset":       assetPath,
			"short":       short,
			"versionPath": VersionPath,
			"taskPath":    TaskPath,
			"groupPath": func(task, key string) string {
				return TaskPath(task) + "/fragments/artifacts/" + pathSegment(key)
			},
			"add":        func(a, b int) int { return a + b },
			"statusText": http.StatusText,
			"long":       longCell,
			"diffPath":   DiffPath,
			"dec":        func(a int) int { return a - 1 },
			"dec64":      func(a int64) int64 { return a - 1 },
			"lane":       func() int { return tlLane },
			"tickY":      func() int { return tlHeight - 4 },
			"minus": func(a int, bs ...int) int {
				for _, b := range bs {
					a -= b
				}
				return a
			},
		})
		out[name] = template.Must(t.ParseFS(webFS, "web/templates/base.html", "web/templates/partials.html", "web/templates/panels.html", "web/templates/"+name+".html"))
	}
	return out
})

// asset is one embedded static file, named in pages with its hash so that
// a browser never runs a stale script against a newer page.
type asset struct {
	body  []byte
	hash  string
	ctype string
}

// assets are read and hashed on first use.
var assets = sync.OnceValue(func() map[string]asset {
	out := map[string]asset{}
	entries, err := fs.ReadDir(webFS, "web/static")
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		b, err := fs.ReadFile(webFS, "web/static/"+e.Name())
		if err != nil {
			panic(err)
		}
		sum := sha256.Sum256(b)
		ctype := "application/octet-stream"
		switch path.Ext(e.Name()) {
		case ".css":
			ctype = "text/css; charset=utf-8"
		case ".js":
			ctype = "text/javascript; charset=utf-8"
		}
		out[e.Name()] = asset{body: b, hash: hex.EncodeToString(sum[:8]), ctype: ctype}
	}
	return out
})

// assetPath is the URL of an embedded asset, with its content hash.
func assetPath(name string) string {
	return AssetsPrefix + name + "?v=" + assets()[name].hash
}

// serveAsset is GET /static/{file}.
func serveAsset(w http.ResponseWriter, r *http.Request) {
	a, ok := assets()[r.PathValue("file")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	pageHeaders(h)
	h.Set("Content-Type", a.ctype)
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", `"`+a.hash+`"`)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}

// markdown renders CommonMark with GitHub's tables, strikethrough,
// autolinks and task lists. Raw HTML is never passed through (goldmark's
// default), and its output is sanitized all the same. Built on first use.
var markdown = sync.OnceValue(func() goldmark.Markdown {
	return goldmark.New(goldmark.WithExtensions(
		extension.NewTable(extension.WithTableCellAlignMethod(extension.TableCellAlignAttribute)),
		extension.Strikethrough, extension.Linkify, extension.TaskList,
	))
})

// reportPolicy is stricter than bluemonday's UGCPolicy: text structure
// only, no images or other embedded content, no id, class (but a code
// block's language), style or event attributes, and links to http and
// https only, opening apart from the page (noopener noreferrer). Built on
// first use.
var reportPolicy = sync.OnceValue(func() *bluemonday.Policy {
	p := bluemonday.NewPolicy()
	p.AllowElements("p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "pre", "code",
		"em", "strong", "del", "s", "ul", "ol", "li", "table", "thead", "tbody", "tr", "th", "td", "sup", "sub", "kbd")
	p.AllowAttrs("start").Matching(bluemonday.Integer).OnElements("ol")
	p.AllowAttrs("align").Matching(regexp.MustCompile(`^(left|center|right)$`)).OnElements("th", "td")
	p.AllowAttrs("class").Matching(regexp.MustCompile(`^language-[A-Za-z0-9_+-]{1,32}$`)).OnElements("code")
	p.AllowAttrs("type").Matching(regexp.MustCompile(`^checkbox$`)).OnElements("input")
	p.AllowAttrs("checked", "disabled").Matching(regexp.MustCompile(`^(|checked|disabled)$`)).OnElements("input")
	p.AllowAttrs("href").OnElements("a")
	p.RequireParseableURLs(true)
	p.AllowRelativeURLs(false)
	p.AllowURLSchemes("http", "https")
	p.RequireNoFollowOnLinks(true)
	p.RequireNoReferrerOnLinks(true)
	p.AddTargetBlankToFullyQualifiedLinks(true)
	return p
})

// renderMarkdown renders a report body to sanitized HTML.
func renderMarkdown(body string) (template.HTML, error) {
	var b bytes.Buffer
	if err := markdown().Convert([]byte(body), &b); err != nil {
		return "", err
	}
	return template.HTML(reportPolicy().SanitizeReader(&b).String()), nil
}

// renderPayload parses canonical payload bytes and prepares them for the
// templates.
func renderPayload(b []byte) (content, error) {
	p, err := artifact.Parse(b)
	if err != nil {
		return content{}, err
	}
	switch p.Type {
	case artifact.TypeReport:
		h, err := renderMarkdown(p.Body)
		if err != nil {
			return content{}, err
		}
		return content{Report: h}, nil
	case artifact.TypeTable:
		return content{Table: &p}, nil
	default:
		return content{Link: &linkView{URL: p.URL, Kind: p.LinkKind, Safe: webURL(p.URL)}}, nil
	}
}

// longCell says whether a table cell is long enough to wrap (the others
// keep to one line, so that a wide table scrolls rather than squeezes).
func longCell(s string) bool {
	return len(s) > 40 && utf8.RuneCountInString(s) > 40
}

// webURL reports whether raw is an http or https URL with a host: only
// such a link becomes an anchor.
func webURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return false
	}
	s := strings.ToLower(u.Scheme)
	return s == "http" || s == "https"
}
