package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"
)

const parentExitStatus = `Exit status: 0 help printed (no subcommand given); 1 unknown subcommand (the
nearest one is suggested).`

// guardParents makes every command that only groups subcommands (root,
// task, artifact, audit, ...) refuse an argument that names none of them,
// instead of printing its help and exiting 0: 'bernstein audit verfy ||
// fail' must fail. With no argument they still print their help.
func guardParents(c *cobra.Command) {
	for _, sub := range c.Commands() {
		guardParents(sub)
	}
	if !c.HasSubCommands() || c.Run != nil || c.RunE != nil {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		return unknownCommand(cmd, args[0])
	}
	if !strings.Contains(c.Long, "Exit status") {
		if c.Long == "" {
			c.Long = c.Short + "."
		}
		c.Long += "\n\n" + parentExitStatus
	}
}

// unknownCommand is the error for a word that names no subcommand of c,
// with the nearest commands as git suggests them.
func unknownCommand(c *cobra.Command, word string) error {
	msg := fmt.Sprintf("unknown command %q for %q", word, c.CommandPath())
	if s := suggest(c, word); len(s) == 1 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	} else if len(s) > 1 {
		q := make([]string, len(s))
		for i, x := range s {
			q[i] = fmt.Sprintf("%q", x)
		}
		msg += "; did you mean one of " + strings.Join(q, ", ") + "?"
	} else {
		msg += fmt.Sprintf(" (see '%s --help')", c.CommandPath())
	}
	return exitCode(1, fmt.Errorf("%s", msg))
}

// suggest returns the full paths of the commands nearest to word: among
// c's own subcommands first, else among all the commands below c (so
// 'bernstein verfy' suggests 'bernstein audit verify').
func suggest(c *cobra.Command, word string) []string {
	if s := nearest(c, word, false); s != nil {
		return s
	}
	return nearest(c, word, true)
}

// nearest returns, sorted, the paths of the subcommands of c (deep: of the
// commands below its subcommands) nearest to word, if any is near enough.
func nearest(c *cobra.Command, word string, deep bool) []string {
	best := -1
	var out []string
	var walk func(p *cobra.Command)
	walk = func(p *cobra.Command) {
		for _, sub := range p.Commands() {
			if !sub.IsAvailableCommand() && sub.Name() != "help" {
				continue
			}
			d := -1
			for _, n := range append([]string{sub.Name()}, sub.Aliases...) {
				if x := nameDistance(word, n); x >= 0 && (d < 0 || x < d) {
					d = x
				}
			}
			if d >= 0 && (p == c) != deep {
				switch {
				case best < 0 || d < best:
					best, out = d, []string{sub.CommandPath()}
				case d == best:
					out = append(out, sub.CommandPath())
				}
			}
			if deep {
				walk(sub)
			}
		}
	}
	walk(c)
	sort.Strings(out)
	return out
}

// nameDistance is how far word is from a command's name: its edit
// distance, 1 for a prefix of two letters or more, -1 when too far.
func nameDistance(word, name string) int {
	w, n := strings.ToLower(word), strings.ToLower(name)
	d := editDistance(w, n)
	if len(w) >= 2 && strings.HasPrefix(n, w) && d > 1 {
		d = 1
	}
	if d > 2 || d >= len(w) {
		return -1
	}
	return d
}

// editDistance is the optimal string alignment distance: insertions,
// deletions, substitutions and transpositions of adjacent letters cost 1.
func editDistance(a, b string) int {
	x, y := []rune(a), []rune(b)
	d := make([][]int, len(x)+1)
	for i := range d {
		d[i] = make([]int, len(y)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(x); i++ {
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(x)][len(y)]
}

// newHelpCmd replaces cobra's help command, which prints the root's usage
// and exits 0 for a topic that names no command.
func newHelpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long: `Print the help of a command: 'bernstein help artifact post' is
'bernstein artifact post --help'.

Exit status: 0 help printed; 1 unknown command (the nearest one is
suggested).`,
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			cmd, _, err := c.Root().Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var out []cobra.Completion
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
					out = append(out, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmd := c.Root()
			for _, a := range args {
				next := findSub(cmd, a)
				if next == nil {
					return unknownCommand(cmd, a)
				}
				cmd = next
			}
			cmd.InitDefaultHelpFlag()
			cmd.InitDefaultVersionFlag()
			return cmd.Help()
		},
	}
}

func findSub(c *cobra.Command, name string) *cobra.Command {
	for _, sub := range c.Commands() {
		if sub.Name() == name || sub.HasAlias(name) {
			return sub
		}
	}
	return nil
}

// documentCompletion gives cobra's completion command and its shells an
// exit status in their help, as every command has.
func documentCompletion(root *cobra.Command) {
	comp := findSub(root, "completion")
	if comp == nil {
		return
	}
	comp.Long = strings.TrimRight(comp.Long, "\n") + `

The scripts complete command names and flags, and from the repository
(--repo, or the enclosing one) task ids (also of --task and --checkpoint),
artifact keys and versions, gate and evidence producer names, revisions
(--commit, --base, --head), remotes, writers to pin or unpin, and the values
of --type and --kind.

` + parentExitStatus
	for _, sh := range comp.Commands() {
		// cobra's bash text, said in 80 columns.
		sh.Long = strings.Replace(sh.Long, "you can install it via your OS's package manager", "install it with your OS's package manager", 1)
		sh.Long = strings.TrimRight(sh.Long, "\n") + "\n\nExit status: 0 script printed; 1 error."
	}
}
