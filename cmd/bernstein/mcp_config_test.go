package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMCPConfigWrite: --write merges into the client's file in the
// repository's top folder, keeping other servers; a file it cannot merge is
// one error line and stays byte for byte as it was.
func TestMCPConfigWrite(t *testing.T) {
	e := newCLIEnv(t)
	path := filepath.Join(e.repo, ".cursor", "mcp.json")
	out := e.ok("mcp", "config", "--client", "cursor", "--write")
	if out != "wrote "+path+": server bernstein added\n" {
		t.Fatalf("first write: %q", out)
	}
	// Another server appears in the file; writing again keeps it.
	b, _ := os.ReadFile(path)
	os.WriteFile(path, []byte(strings.Replace(string(b), `"mcpServers": {`, `"mcpServers": {"theirs": {"command": "x"},`, 1)), 0o644)
	if out := e.ok("mcp", "config", "--client", "cursor", "--write"); !strings.HasSuffix(out, "server bernstein replaced; kept theirs\n") {
		t.Fatalf("second write: %q", out)
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), `"theirs"`) || !strings.Contains(string(b), "${env:BERNSTEIN_CLAIM_TOKEN}") {
		t.Fatalf("merged file:\n%s", b)
	}
	// VS Code's file may hold comments: refused, untouched, and no
	// temporary file left beside it.
	vs := filepath.Join(e.repo, ".vscode", "mcp.json")
	os.MkdirAll(filepath.Dir(vs), 0o755)
	orig := "// mine\n{\"servers\": {}}\n"
	os.WriteFile(vs, []byte(orig), 0o644)
	r := e.want(1, "mcp", "config", "--client", "vscode", "--write")
	oneErrorLine(t, []string{"mcp", "config", "--client", "vscode", "--write"}, r)
	if b, _ := os.ReadFile(vs); string(b) != orig {
		t.Fatalf("a refused merge changed the file: %q", b)
	}
	if ents, _ := os.ReadDir(filepath.Dir(vs)); len(ents) != 1 {
		t.Fatalf("%d files beside the refused one", len(ents))
	}
	if r := e.want(1, "mcp", "config", "--client", "emacs"); !strings.Contains(r.err, `invalid client: "emacs"`) {
		t.Fatalf("unknown client: %q", r.err)
	}
	if r := e.want(1, "mcp", "config", "--client", "cursor", "--http", "ftp://x"); !strings.Contains(r.err, "invalid http") {
		t.Fatalf("bad URL: %q", r.err)
	}
}
