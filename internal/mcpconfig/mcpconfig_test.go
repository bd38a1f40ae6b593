package mcpconfig

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestMergeKeepsOtherServers: a merge adds (or replaces) bernstein's entry
// and keeps every other server, member and VS Code input.
func TestMergeKeepsOtherServers(t *testing.T) {
	cases := []struct {
		client, existing, key string
	}{
		{"claude-code", `{"mcpServers":{"other":{"command":"x"},"bernstein":{"command":"old"}},"extra":1}`, "mcpServers"},
		{"cursor", `{"mcpServers":{"other":{"url":"http://a.test/mcp"}}}`, "mcpServers"},
		{"vscode", `{"servers":{"other":{"type":"stdio","command":"x"}},"inputs":[{"type":"promptString","id":"theirs"},{"type":"promptString","id":"bernstein-claim-token","description":"stale"}]}`, "servers"},
		{"inspector", `{"mcpServers":{"other":{"command":"x"}}}`, "mcpServers"},
	}
	for _, c := range cases {
		res, err := Merge(Spec{Client: c.client, Name: "bernstein", Command: "bernstein"}, []byte(c.existing))
		if err != nil {
			t.Fatalf("%s: %v", c.client, err)
		}
		var doc map[string]any
		if err := json.Unmarshal(res.Data, &doc); err != nil {
			t.Fatalf("%s: %v\n%s", c.client, err, res.Data)
		}
		servers := doc[c.key].(map[string]any)
		if servers["other"] == nil || servers["bernstein"] == nil || len(res.Kept) != 1 || res.Kept[0] != "other" {
			t.Fatalf("%s: %s", c.client, res.Data)
		}
		if c.client == "claude-code" && (!res.Replaced || doc["extra"] == nil || servers["bernstein"].(map[string]any)["command"] != "bernstein") {
			t.Fatalf("claude-code: the old entry was not replaced or a member was lost: %s", res.Data)
		}
		if c.client == "vscode" {
			var ids []string
			for _, in := range doc["inputs"].([]any) {
				ids = append(ids, in.(map[string]any)["id"].(string))
			}
			if strings.Join(ids, ",") != "theirs,bernstein-agent,bernstein-claim-token" {
				t.Fatalf("vscode inputs: %v", ids)
			}
		}
	}
}

// TestTokensAreReferences: every client's entry names the token through its
// own mechanism, never a value.
func TestTokensAreReferences(t *testing.T) {
	want := map[string]string{
		"claude-code": "${BERNSTEIN_CLAIM_TOKEN}",
		"cursor":      "${env:BERNSTEIN_CLAIM_TOKEN}",
		"vscode":      "${input:bernstein-claim-token}",
	}
	for client, ref := range want {
		for _, url := range []string{"", "http://127.0.0.1:7420/mcp"} {
			res, err := Merge(Spec{Client: client, Name: "bernstein", Command: "bernstein", URL: url}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(res.Data), ref) {
				t.Fatalf("%s %q: no %s in\n%s", client, url, ref, res.Data)
			}
		}
	}
	if _, err := Merge(Spec{Client: "emacs"}, nil); err == nil || !strings.Contains(err.Error(), "invalid client") {
		t.Fatalf("unknown client: %v", err)
	}
	if _, err := Merge(Spec{Client: "cursor", Name: "bernstein"}, []byte("// a comment\n{}")); err == nil {
		t.Fatal("a file with a comment was merged")
	}
	if _, err := Merge(Spec{Client: "cursor", Name: "bernstein"}, []byte(`{"mcpServers":[1]}`)); err == nil {
		t.Fatal("a file whose servers are not an object was merged")
	}
}
