package git

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Two ways to read a repository's configuration, one for each need:
//
//   - FileConfigValue and FileHasSection read the repository's own config
//     file, plainly (no includes, no quoting rules), without starting git.
//     They give hints only: a caller that finds nothing there asks git, and
//     a value that decides anything is read again by git's own parser.
//   - ConfigValues asks git (git config), which applies every rule.

// fileConfig calls fn with each key of the repository's own config file,
// in order: its section (lower case), subsection, key (lower case) and value.
func fileConfig(gitDir string, fn func(section, sub, key, value string)) {
	f, err := os.Open(filepath.Join(gitDir, "config"))
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	section, sub := "", ""
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			end := strings.IndexByte(line, ']')
			if end < 0 {
				section, sub = "", ""
				continue
			}
			name := strings.TrimSpace(line[1:end])
			section, sub = name, ""
			if i := strings.IndexAny(name, " \t"); i >= 0 {
				section = name[:i]
				sub = strings.Trim(strings.TrimSpace(name[i:]), `"`)
			}
			section = strings.ToLower(section)
			line = strings.TrimSpace(line[end+1:])
		}
		k, v, found := strings.Cut(line, "=")
		if found && section != "" {
			fn(section, sub, strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v))
		}
	}
}

// FileConfigValue is the last value of section.key in the repository's own
// config file ("" when it has none): a hint, see above.
func FileConfigValue(gitDir, section, key string) string {
	out := ""
	fileConfig(gitDir, func(s, sub, k, v string) {
		if sub == "" && s == strings.ToLower(section) && k == strings.ToLower(key) {
			out = v
		}
	})
	return out
}

// FileHasSection reports whether the repository's own config file has a
// [section "sub"] with a key in it: a hint, see above.
func FileHasSection(gitDir, section, sub string) bool {
	found := false
	fileConfig(gitDir, func(s, ss, _, _ string) {
		found = found || s == strings.ToLower(section) && ss == sub
	})
	return found
}

// ConfigValues is every value of a multi-valued key, as git reads the
// repository's configuration under p (nil when it is not set).
func ConfigValues(p Policy, gitDir, key string) ([]string, error) {
	out, errb, err := Cmd{Policy: p, GitDir: gitDir, Args: []string{"config", "--get-all", key}}.Run()
	if ExitCode(err) == 1 {
		return nil, nil // not set
	}
	if err != nil {
		return nil, fmt.Errorf("git config %s: %s", key, Message(errb))
	}
	var vs []string
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if l != "" {
			vs = append(vs, l)
		}
	}
	return vs, nil
}

// IsConfigSet reports whether key is set anywhere git reads it for the
// user (their global and system config included).
func IsConfigSet(gitDir, key string) bool {
	_, _, err := Cmd{Policy: User, GitDir: gitDir, Args: []string{"config", key}}.Run()
	return err == nil
}

// SetConfig writes key in the repository's own config file: git config
// --add (a further value) with add, else git config --local (the one
// value). Its error is git's message.
func SetConfig(gitDir, key, value string, add bool) error {
	mode := "--local"
	if add {
		mode = "--add"
	}
	if _, errb, err := (Cmd{Policy: User, GitDir: gitDir, Args: []string{"config", mode, key, value}}).Run(); err != nil {
		return errors.New(Message(errb))
	}
	return nil
}
