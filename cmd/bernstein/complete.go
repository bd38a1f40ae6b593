package main

import (
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
	"github.com/bernstein/bernstein/internal/git"
)

// Shell completion from the repository: task ids (as arguments and as the
// values of --task and --checkpoint), artifact keys and versions, gate and
// producer names, revisions, remotes, writers, and the fixed values of
// --type and --kind. Completion only reads (it never creates a key) and
// stays quiet when the repository cannot be opened.

const noFiles = cobra.ShellCompDirectiveNoFileComp

// fromStore opens the repository (--repo, BERNSTEIN_REPO or the enclosing
// one) for a completion, or returns nothing.
func fromStore(g *factory, complete func(s *bernstein.Store) []cobra.Completion) []cobra.Completion {
	o := g.Options()
	o.Warn = nil
	s, err := bernstein.Open(o)
	if err != nil {
		return nil
	}
	defer s.Close()
	return complete(s)
}

func matching(words []string, toComplete string) []cobra.Completion {
	var out []cobra.Completion
	for _, w := range words {
		if strings.HasPrefix(w, toComplete) {
			out = append(out, w)
		}
	}
	return out
}

func taskIDs(g *factory, toComplete string) []cobra.Completion {
	return fromStore(g, func(s *bernstein.Store) []cobra.Completion {
		ids, err := s.TaskIDs()
		if err != nil {
			return nil
		}
		return matching(ids, toComplete)
	})
}

// taskWords completes from what the task's ledger and journal hold.
func taskWords(g *factory, task, toComplete string, words func(*bernstein.TaskInfo) []string) []cobra.Completion {
	return fromStore(g, func(s *bernstein.Store) []cobra.Completion {
		info, err := s.Task(task)
		if err != nil {
			return nil
		}
		return matching(words(info), toComplete)
	})
}

func artifactKeys(info *bernstein.TaskInfo) []string { return sortedKeys(info.Artifacts) }

func gateNames(info *bernstein.TaskInfo) []string {
	var out []string
	for _, gt := range info.Gates {
		out = append(out, gt.Name)
	}
	return out
}

// completeTask completes the first argument with a task id, and the next
// (if any) with then(task).
func completeTask(g *factory, then func(task string, args []string, toComplete string) []cobra.Completion) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return taskIDs(g, toComplete), noFiles
		}
		if then == nil {
			return nil, noFiles
		}
		return then(args[0], args[1:], toComplete), noFiles
	}
}

// keyOf completes the artifact key after the task.
func keyOf(g *factory) func(string, []string, string) []cobra.Completion {
	return func(task string, rest []string, toComplete string) []cobra.Completion {
		if len(rest) > 0 {
			return nil
		}
		return taskWords(g, task, toComplete, artifactKeys)
	}
}

// versionsOf completes --version of 'artifact show <task> <key>' with the
// key's versions, 1 to the latest.
func versionsOf(g *factory) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) < 2 {
			return nil, noFiles
		}
		return taskWords(g, args[0], toComplete, func(info *bernstein.TaskInfo) []string {
			var out []string
			for v := int64(1); v <= info.Artifacts[args[1]]; v++ {
				out = append(out, strconv.FormatInt(v, 10))
			}
			return out
		}), noFiles
	}
}

// flagTaskIDs completes a flag whose value is a task id.
func flagTaskIDs(g *factory) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return taskIDs(g, toComplete), noFiles
	}
}

// revisions completes a revision with HEAD, the branches and the tags.
func revisions(g *factory) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return fromStore(g, func(s *bernstein.Store) []cobra.Completion {
			run := func(args ...string) ([]byte, error) {
				return git.Cmd{Policy: git.Isolated, GitDir: s.GitDir(), Args: args}.Output()
			}
			var words []string
			if _, err := run("rev-parse", "-q", "--verify", "HEAD^{commit}"); err == nil {
				words = append(words, "HEAD")
			}
			out, err := run("for-each-ref", "--format=%(refname:short)", "refs/heads", "refs/tags")
			if err != nil {
				return nil
			}
			return matching(append(words, strings.Fields(string(out))...), toComplete)
		}), noFiles
	}
}

// remoteNames completes a remote's name (the first argument only).
func remoteNames(g *factory, firstArg bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if firstArg && len(args) > 0 {
			return nil, noFiles
		}
		return fromStore(g, func(s *bernstein.Store) []cobra.Completion {
			names, err := s.Remotes()
			if err != nil {
				return nil
			}
			return matching(names, toComplete)
		}), noFiles
	}
}

// writerNames completes writers that keep(wk) accepts, each once.
func writerNames(g *factory, keep func(bernstein.WriterTrust) bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		given := map[string]bool{}
		for _, a := range args {
			given[a] = true
		}
		return fromStore(g, func(s *bernstein.Store) []cobra.Completion {
			wks, err := s.WriterKeys()
			if err != nil {
				return nil
			}
			var names []string
			for _, wk := range wks {
				if keep(wk) && !given[wk.Writer] {
					names = append(names, wk.Writer)
				}
			}
			return matching(names, toComplete)
		}), noFiles
	}
}

func completeFixed(values ...string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return matching(values, toComplete), noFiles
	}
}

// registerCompletions wires the completion functions into the tree.
func registerCompletions(g *factory, root *cobra.Command) {
	registerArgCompletions(g, root)
	registerFlagCompletions(g, root)
	root.RegisterFlagCompletionFunc("repo", func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return nil, cobra.ShellCompDirectiveFilterDirs
	})
}

// findPath is the command at path below root, or nil.
func findPath(root *cobra.Command, path ...string) *cobra.Command {
	c := root
	for _, p := range path {
		if c = findSub(c, p); c == nil {
			return nil
		}
	}
	return c
}

// registerArgCompletions completes the positional arguments.
func registerArgCompletions(g *factory, root *cobra.Command) {
	set := func(f cobra.CompletionFunc, paths ...[]string) {
		for _, p := range paths {
			if c := findPath(root, p...); c != nil && c.ValidArgsFunction == nil {
				c.ValidArgsFunction = f
			}
		}
	}
	set(completeTask(g, nil),
		[]string{"task", "claim"}, []string{"task", "show"}, []string{"task", "progress"},
		[]string{"task", "release"}, []string{"task", "start"}, []string{"task", "suspend"}, []string{"task", "resume"},
		[]string{"task", "complete"}, []string{"task", "fail"}, []string{"task", "abandon"}, []string{"task", "reopen"},
		[]string{"checkpoint"}, []string{"diff", "capture"},
		[]string{"artifact", "list"}, []string{"artifacts", "list"},
	)
	set(completeTask(g, keyOf(g)),
		[]string{"artifact", "show"}, []string{"artifacts", "show"}, []string{"artifact", "post"})
	set(completeTask(g, gateOf(g)), []string{"gate", "run"})
	set(completeTask(g, producersOf(g)), []string{"evidence", "run"})
	set(func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return nil, noFiles
	}, []string{"task", "create"}, []string{"task", "list"}, []string{"init"})
	// Positional remotes and writers.
	set(remoteNames(g, true), []string{"remote", "setup"}, []string{"push"}, []string{"fetch"})
	set(writerNames(g, func(wk bernstein.WriterTrust) bool {
		return wk.Trust == bernstein.TrustUnpinned || wk.Trust == bernstein.TrustChanged
	}), []string{"keys", "pin"})
	set(writerNames(g, func(wk bernstein.WriterTrust) bool {
		return len(wk.Pinned) > 0 && wk.Trust != bernstein.TrustOwn
	}), []string{"keys", "unpin"})
}

// gateOf completes the gate after the task.
func gateOf(g *factory) func(string, []string, string) []cobra.Completion {
	return func(task string, rest []string, toComplete string) []cobra.Completion {
		if len(rest) > 0 {
			return nil
		}
		return taskWords(g, task, toComplete, gateNames)
	}
}

// producersOf completes the evidence producers after the task, each once.
func producersOf(g *factory) func(string, []string, string) []cobra.Completion {
	return func(task string, rest []string, toComplete string) []cobra.Completion {
		given := map[string]bool{}
		for _, r := range rest {
			given[r] = true
		}
		return taskWords(g, task, toComplete, func(info *bernstein.TaskInfo) []string {
			var out []string
			for _, p := range info.Evidence {
				if !given[p.Name] {
					out = append(out, p.Name)
				}
			}
			return out
		})
	}
}

// registerFlagCompletions completes the flag values the repository knows.
func registerFlagCompletions(g *factory, root *cobra.Command) {
	flag := func(path []string, name string, f cobra.CompletionFunc) {
		c := findPath(root, path...)
		if c == nil {
			panic("completion: no command " + strings.Join(path, " "))
		}
		if err := c.RegisterFlagCompletionFunc(name, f); err != nil {
			panic("completion: " + strings.Join(path, " ") + ": " + err.Error())
		}
	}
	flag([]string{"artifact", "post"}, "type", completeFixed(artifact.Types...))
	flag([]string{"artifact", "post"}, "kind", completeFixed(artifact.LinkKinds...))
	flag([]string{"artifact", "show"}, "version", versionsOf(g))
	flag([]string{"artifacts", "show"}, "version", versionsOf(g))
	flag([]string{"audit", "verify"}, "task", flagTaskIDs(g))
	flag([]string{"hooks", "install"}, "checkpoint", flagTaskIDs(g))
	flag([]string{"hooks", "run"}, "task", flagTaskIDs(g))
	flag([]string{"checkpoint"}, "commit", revisions(g))
	flag([]string{"diff", "capture"}, "base", revisions(g))
	flag([]string{"diff", "capture"}, "head", revisions(g))
	flag([]string{"init"}, "remote", remoteNames(g, false))
}
