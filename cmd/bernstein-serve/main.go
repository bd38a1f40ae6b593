// Command bernstein-serve is bernstein's HTTP server: the task pages, the
// task API, the event stream and the MCP tools over streamable HTTP. It is
// the program 'bernstein serve' and 'bernstein mcp --http' become (they
// replace themselves with it, found beside bernstein or on PATH, with the
// same arguments, environment and streams), and it takes the same command
// lines:
//
//	bernstein-serve [--repo DIR] [--allowed-signers FILE] serve [--addr ADDR] [--allow-remote] [--read-token T]
//	bernstein-serve [--repo DIR] [--allowed-signers FILE] mcp --http ADDR [--allow-remote]
//
// It is a program of its own so that the packages only the server needs
// (the markdown renderer and HTML sanitizer of the pages) are not
// initialised at the start of every other bernstein command
// (docs/performance.md, Start-up). Install both with
// 'go install github.com/bernstein/bernstein/cmd/...@latest'.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], newIO()))
}
