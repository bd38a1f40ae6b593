package main

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein/internal/atomicfile"
	"github.com/bernstein/bernstein/internal/git"
	"github.com/bernstein/bernstein/internal/mcpconfig"
)

type mcpConfigOptions struct {
	IO *IO
	mcpconfig.Spec
	Write bool   // merge into the client's file instead of printing
	File  string // with Write: the file (default: the client's file in the top folder)
	// WorkTree finds the top folder of the repository's work tree.
	WorkTree func() (string, error)
}

const mcpConfigLong = `Print the configuration an MCP client needs to start bernstein's MCP server over
stdio (or, with --http URL, to reach 'bernstein serve' or 'bernstein mcp --http'
at URL), in the client's own format:

  claude-code  .mcp.json          mcpServers; ${BERNSTEIN_AGENT},
                                  ${BERNSTEIN_CLAIM_TOKEN}
  cursor       .cursor/mcp.json   mcpServers; ${env:BERNSTEIN_AGENT},
                                  ${env:BERNSTEIN_CLAIM_TOKEN}
  vscode       .vscode/mcp.json   servers, and inputs that prompt for the agent
                                  and the token (the token as a password)
  inspector    mcp-inspector.json mcpServers, for the MCP Inspector's --config;
                                  the caller goes on its command line:
                                  -e BERNSTEIN_AGENT=...
                                  -e BERNSTEIN_CLAIM_TOKEN=... (stdio) or
                                  --header "Authorization: Bearer ..." (HTTP)

The claim token is never written: each file refers to it through the
client's own variable or input mechanism. With --write the server entry is
merged into the client's file in the repository's top folder (or --file): the
file's other servers and members are kept, an entry of the same name is
replaced, and the file is replaced whole (a temporary file, renamed), so a
client never reads half of it. A file that is not a JSON object (comments
included) is refused and left as it is.

Exit status: 0 printed or written; 1 bad flags, or a file that cannot be
merged (nothing written).`

func newMCPConfigCmd(f *factory, runF func(*mcpConfigOptions) error) *cobra.Command {
	o := &mcpConfigOptions{IO: f.IO, WorkTree: func() (string, error) { return workTree(f) }}
	cmd := &cobra.Command{
		Use:   "config --client CLIENT [--http URL] [--write]",
		Short: "Print an MCP client configuration (or merge it into its file)",
		Long:  mcpConfigLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(o)
			}
			return mcpConfigRun(o)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.Client, "client", "", "the client: "+strings.Join(mcpconfig.Clients, ", "))
	fl.StringVar(&o.URL, "http", "", "reach the streamable HTTP endpoint at URL (e.g. http://127.0.0.1:7420/mcp) instead of starting a stdio server")
	fl.BoolVar(&o.Write, "write", false, "merge into the client's file instead of printing")
	fl.StringVar(&o.File, "file", "", "with --write: the file to merge into (default: the client's file in the repository's top folder)")
	fl.StringVar(&o.Name, "name", "bernstein", "the server's name in the file")
	fl.StringVar(&o.Command, "command", "bernstein", "the command that starts the stdio server")
	return cmd
}

func mcpConfigRun(o *mcpConfigOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	sp := o.Spec
	top, err := o.WorkTree()
	if err != nil && (o.Write && o.File == "" || sp.Client == "inspector" && sp.URL == "") {
		return err
	}
	sp.Dir = top
	if h := os.Getenv("BERNSTEIN_HOME"); h != "" {
		if sp.Home, err = filepath.Abs(h); err != nil {
			return err
		}
	}
	if !o.Write {
		res, err := mcpconfig.Merge(sp, nil)
		if err != nil {
			return err
		}
		_, err = o.IO.Out.Write(res.Data)
		return err
	}
	path := o.File
	if path == "" {
		path = filepath.Join(top, mcpconfig.File(sp.Client))
	}
	return writeMCPConfig(o.IO, sp, path)
}

// check refuses a client or URL mcpconfig does not know.
func (o *mcpConfigOptions) check() error {
	if o.Client == "" {
		return fmt.Errorf("--client is required: one of %s", strings.Join(mcpconfig.Clients, ", "))
	}
	if mcpconfig.File(o.Client) == "" {
		return fmt.Errorf("invalid client: %q (one of %s)", o.Client, strings.Join(mcpconfig.Clients, ", "))
	}
	if o.URL != "" {
		u, err := url.Parse(o.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return fmt.Errorf("invalid http: %q: an http(s) URL of the MCP endpoint, such as http://127.0.0.1:7420/mcp, with no user name or password", o.URL)
		}
	}
	return nil
}

// writeMCPConfig merges the server's entry into the file at path, replacing
// the file whole, and says what it did.
func writeMCPConfig(sio *IO, sp mcpconfig.Spec, path string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	res, err := mcpconfig.Merge(sp, old)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := atomicfile.Write(path, res.Data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	what := "added"
	if res.Replaced {
		what = "replaced"
	}
	fmt.Fprintf(sio.Out, "wrote %s: server %s %s", path, sp.Name, what)
	if len(res.Kept) > 0 {
		fmt.Fprintf(sio.Out, "; kept %s", strings.Join(res.Kept, ", "))
	}
	fmt.Fprintln(sio.Out)
	return nil
}

// workTree is the top folder of the repository's work tree.
func workTree(f *factory) (string, error) {
	dir := f.Options().Repo
	if dir == "" {
		dir = "."
	}
	top, err := git.TopLevel(dir)
	if err != nil {
		return "", fmt.Errorf("%s is not in a git work tree: give --file, or run in the repository", dir)
	}
	return top, nil
}
