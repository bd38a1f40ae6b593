package main

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/bernstein/bernstein"
	"github.com/bernstein/bernstein/artifact"
)

// Shell completion from the repository: task ids, artifact keys, gate and
// producer names, and the fixed values of --type and --kind. Completion only
// reads (it never creates a key) and stays quiet when the repository cannot
// be opened.

const noFiles = cobra.ShellCompDirectiveNoFileComp

// withStore opens the repository (--repo, BERNSTEIN_REPO or the enclosing
// one) for a completion, or returns nothing.
func withStore(g *globals, f func(s *bernstein.Store) []cobra.Completion) []cobra.Completion {
	o := g.options()
	o.Warn = nil
	s, err := bernstein.Open(o)
	if err != nil {
		return nil
	}
	defer s.Close()
	return f(s)
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

func taskIDs(g *globals, toComplete string) []cobra.Completion {
	return withStore(g, func(s *bernstein.Store) []cobra.Completion {
		ids, err := s.TaskIDs()
		if err != nil {
			return nil
		}
		return matching(ids, toComplete)
	})
}

// taskWords completes from what the task's ledger and journal hold.
func taskWords(g *globals, task, toComplete string, words func(*bernstein.TaskInfo) []string) []cobra.Completion {
	return withStore(g, func(s *bernstein.Store) []cobra.Completion {
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
func completeTask(g *globals, then func(task string, args []string, toComplete string) []cobra.Completion) cobra.CompletionFunc {
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
func keyOf(g *globals) func(string, []string, string) []cobra.Completion {
	return func(task string, rest []string, toComplete string) []cobra.Completion {
		if len(rest) > 0 {
			return nil
		}
		return taskWords(g, task, toComplete, artifactKeys)
	}
}

func completeFixed(values ...string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return matching(values, toComplete), noFiles
	}
}

// registerCompletions wires the completion functions into the tree.
func registerCompletions(g *globals, root *cobra.Command) {
	find := func(path ...string) *cobra.Command {
		c := root
		for _, p := range path {
			if c = findSub(c, p); c == nil {
				return nil
			}
		}
		return c
	}
	set := func(f cobra.CompletionFunc, paths ...[]string) {
		for _, p := range paths {
			if c := find(p...); c != nil && c.ValidArgsFunction == nil {
				c.ValidArgsFunction = f
			}
		}
	}
	justTask := completeTask(g, nil)
	set(justTask,
		[]string{"task", "claim"}, []string{"task", "show"}, []string{"task", "progress"},
		[]string{"task", "release"}, []string{"task", "start"}, []string{"task", "suspend"}, []string{"task", "resume"},
		[]string{"task", "complete"}, []string{"task", "fail"}, []string{"task", "abandon"}, []string{"task", "reopen"},
		[]string{"checkpoint"}, []string{"diff", "capture"},
		[]string{"artifact", "list"}, []string{"artifacts", "list"},
	)
	set(completeTask(g, keyOf(g)),
		[]string{"artifact", "show"}, []string{"artifacts", "show"}, []string{"artifact", "post"})
	set(completeTask(g, func(task string, rest []string, toComplete string) []cobra.Completion {
		if len(rest) > 0 {
			return nil
		}
		return taskWords(g, task, toComplete, gateNames)
	}), []string{"gate", "run"})
	set(completeTask(g, func(task string, rest []string, toComplete string) []cobra.Completion {
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
	}), []string{"evidence", "run"})
	set(func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return nil, noFiles
	}, []string{"task", "create"}, []string{"task", "list"}, []string{"init"})
	if post := find("artifact", "post"); post != nil {
		post.RegisterFlagCompletionFunc("type", completeFixed(artifact.Types...))
		post.RegisterFlagCompletionFunc("kind", completeFixed(artifact.LinkKinds...))
	}
	root.RegisterFlagCompletionFunc("repo", func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return nil, cobra.ShellCompDirectiveFilterDirs
	})
}
