// Package mcpconfig writes the MCP client configurations that start (or
// reach) bernstein's MCP server, in each client's own file format: Claude
// Code's .mcp.json, Cursor's .cursor/mcp.json, VS Code's .vscode/mcp.json and
// the MCP Inspector's --config file. The claim token is never written: each
// file names it through the client's own variable or input mechanism
// (docs/mcp.md, Client configurations).
package mcpconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Clients are the supported clients, by their --client name.
var Clients = []string{"claude-code", "cursor", "vscode", "inspector"}

// File is where a client reads its project configuration, relative to the
// project's top folder.
func File(client string) string {
	switch client {
	case "claude-code":
		return ".mcp.json"
	case "cursor":
		return ".cursor/mcp.json"
	case "vscode":
		return ".vscode/mcp.json"
	case "inspector":
		return "mcp-inspector.json"
	}
	return ""
}

// Spec says what to configure.
type Spec struct {
	Client string
	// Name is the server's name in the file.
	Name string
	// Command starts the stdio server (the bernstein executable).
	Command string
	// Dir is the repository's work tree, the stdio server's working
	// directory where the client takes one (the Inspector).
	Dir string
	// Home is BERNSTEIN_HOME when it is set: the Inspector starts a stdio
	// server with a minimal environment (HOME, PATH, ...), so its file names
	// the home (a path, no secret). The other clients pass theirs on.
	Home string
	// URL, when set, is a streamable HTTP endpoint (bernstein serve or mcp
	// --http) to reach instead of starting a stdio server.
	URL string
}

// The environment variables (or inputs) that carry the caller.
const (
	EnvAgent = "BERNSTEIN_AGENT"
	EnvToken = "BERNSTEIN_CLAIM_TOKEN"
)

// VS Code's input ids.
const (
	inputAgent = "bernstein-agent"
	inputToken = "bernstein-claim-token"
)

// ref is how a client's file names a variable.
func ref(client, name string) string {
	switch client {
	case "claude-code":
		return "${" + name + "}"
	case "cursor":
		return "${env:" + name + "}"
	case "vscode":
		if name == EnvAgent {
			return "${input:" + inputAgent + "}"
		}
		return "${input:" + inputToken + "}"
	}
	return ""
}

// Server is the server's entry in the client's file.
func Server(sp Spec) (map[string]any, error) {
	if File(sp.Client) == "" {
		return nil, fmt.Errorf("invalid client: %q (one of %s)", sp.Client, strings.Join(Clients, ", "))
	}
	s := map[string]any{}
	if sp.URL != "" {
		switch sp.Client {
		case "inspector":
			// The Inspector expands no variables: its CLI takes the header
			// (--header "Authorization: Bearer $BERNSTEIN_CLAIM_TOKEN").
			s["type"] = "streamable-http"
		case "cursor":
			// Cursor tells HTTP from stdio by the url field.
		default:
			s["type"] = "http"
		}
		s["url"] = sp.URL
		if sp.Client != "inspector" {
			s["headers"] = map[string]any{"Authorization": "Bearer " + ref(sp.Client, EnvToken)}
		}
		return s, nil
	}
	if sp.Client == "claude-code" || sp.Client == "vscode" {
		s["type"] = "stdio"
	}
	s["command"] = sp.Command
	s["args"] = []any{"mcp"}
	switch sp.Client {
	case "inspector":
		// The caller is given on the Inspector's command line
		// (-e BERNSTEIN_AGENT=... -e BERNSTEIN_CLAIM_TOKEN=...).
		if sp.Dir != "" {
			s["cwd"] = sp.Dir
		}
		if sp.Home != "" {
			s["env"] = map[string]any{"BERNSTEIN_HOME": sp.Home}
		}
	default:
		s["env"] = map[string]any{EnvAgent: ref(sp.Client, EnvAgent), EnvToken: ref(sp.Client, EnvToken)}
		if sp.Client == "vscode" {
			s["cwd"] = "${workspaceFolder}"
		}
	}
	return s, nil
}

// inputs are VS Code's prompts for the variables a server entry names.
func inputs(sp Spec) []any {
	token := map[string]any{"type": "promptString", "id": inputToken, "description": "bernstein claim token ('bernstein task claim' prints it)", "password": true}
	if sp.URL != "" {
		return []any{token}
	}
	return []any{map[string]any{"type": "promptString", "id": inputAgent, "description": "bernstein agent (the claim's agent)"}, token}
}

// serversKey is the member that maps server names to entries.
func serversKey(client string) string {
	if client == "vscode" {
		return "servers"
	}
	return "mcpServers"
}

// Result is a merged file and what the merge did.
type Result struct {
	Data []byte
	// Replaced is set when the file already had a server of that name.
	Replaced bool
	// Kept are the other servers the file holds, sorted.
	Kept []string
}

// Merge puts the server (and, for VS Code, its inputs) into existing, the
// file's current content (nil: no file), keeping every other member,
// server and input. Content that is not a JSON object is refused.
func Merge(sp Spec, existing []byte) (*Result, error) {
	entry, err := Server(sp)
	if err != nil {
		return nil, err
	}
	top := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(existing)) > 0 {
		if err := json.Unmarshal(existing, &top); err != nil {
			return nil, fmt.Errorf("%s is not a JSON object (%v): merge by hand, or print the configuration without --write", File(sp.Client), err)
		}
	}
	key := serversKey(sp.Client)
	servers := map[string]json.RawMessage{}
	if raw, ok := top[key]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &servers); err != nil {
			return nil, fmt.Errorf("%s: %q is not an object of servers: merge by hand", File(sp.Client), key)
		}
	}
	res := &Result{}
	for name := range servers {
		if name == sp.Name {
			res.Replaced = true
		} else {
			res.Kept = append(res.Kept, name)
		}
	}
	sort.Strings(res.Kept)
	if servers[sp.Name], err = marshal(entry); err != nil {
		return nil, err
	}
	if top[key], err = marshal(servers); err != nil {
		return nil, err
	}
	if sp.Client == "vscode" {
		var list []json.RawMessage
		if raw, ok := top["inputs"]; ok && string(raw) != "null" {
			if err := json.Unmarshal(raw, &list); err != nil {
				return nil, fmt.Errorf("%s: \"inputs\" is not a list: merge by hand", File(sp.Client))
			}
		}
		ours := inputs(sp)
		mine := map[string]bool{}
		for _, in := range ours {
			mine[in.(map[string]any)["id"].(string)] = true
		}
		var out []any
		for _, raw := range list {
			var in struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(raw, &in) == nil && mine[in.ID] {
				continue // ours, written again below
			}
			out = append(out, raw)
		}
		out = append(out, ours...)
		if top["inputs"], err = marshal(out); err != nil {
			return nil, err
		}
	}
	flat, err := marshal(top)
	if err != nil {
		return nil, err
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, flat, "", "  "); err != nil {
		return nil, err
	}
	pretty.WriteByte('\n')
	res.Data = pretty.Bytes()
	return res, nil
}

// marshal is json.Marshal without HTML escaping (a URL keeps its &).
func marshal(v any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSpace(b.Bytes()), nil
}
