package git

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// userSetup gives this process a user's git setup: a global config and a
// global attributes file (through HOME and XDG_CONFIG_HOME), configuration
// in the environment (GIT_CONFIG_COUNT and GIT_CONFIG_PARAMETERS), and
// GIT_DIR naming another repository. It returns a repository (with one
// commit, A, and a replace ref that stands B in for it) and that other one.
func userSetup(t *testing.T) (repo, other, a string) {
	t.Helper()
	root := t.TempDir()
	repo, other = filepath.Join(root, "repo"), filepath.Join(root, "other")
	for _, dir := range []string{repo, other} {
		gitIn(t, root, "init", "-q", dir)
	}
	a = gitIn(t, repo, "commit-tree", "-m", "A", gitIn(t, repo, "mktree"))
	b := gitIn(t, repo, "commit-tree", "-m", "B", gitIn(t, repo, "mktree"))
	gitIn(t, repo, "replace", a, b)

	home := filepath.Join(root, "home")
	os.MkdirAll(filepath.Join(home, ".config", "git"), 0o755)
	os.WriteFile(filepath.Join(home, ".gitconfig"), []byte("[probe]\n\tglobal = from-home\n"), 0o644)
	os.WriteFile(filepath.Join(home, ".config", "git", "attributes"), []byte("*.txt -diff\n"), 0o644)
	t.Setenv("HOME", home)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(home, ".config"))
	t.Setenv("GIT_CONFIG_NOSYSTEM", "")
	t.Setenv("GIT_CONFIG_COUNT", "1")
	t.Setenv("GIT_CONFIG_KEY_0", "probe.count")
	t.Setenv("GIT_CONFIG_VALUE_0", "from-env")
	t.Setenv("GIT_CONFIG_PARAMETERS", "'probe.params'='from-params'")
	t.Setenv("GIT_DIR", filepath.Join(other, ".git"))
	return repo, other, a
}

// TestIsolatedSeesNoUserSetup: a call under Isolated sees none of the
// user's configuration, attributes, replace refs or repository choice;
// under User it sees all of them, as the user's own git does.
func TestIsolatedSeesNoUserSetup(t *testing.T) {
	repo, other, a := userSetup(t)
	gitDir := filepath.Join(repo, ".git")
	get := func(p Policy, key string) string {
		out, _, err := Cmd{Policy: p, GitDir: gitDir, Args: []string{"config", "--get", key}}.Run()
		if err != nil && ExitCode(err) != 1 {
			t.Fatalf("git config --get %s: %v", key, err)
		}
		return strings.TrimSpace(string(out))
	}
	for key, want := range map[string]string{"probe.global": "from-home", "probe.count": "from-env", "probe.params": "from-params"} {
		if got := get(User, key); got != want {
			t.Errorf("User: %s = %q, want %q", key, got, want)
		}
		if got := get(Isolated, key); got != "" {
			t.Errorf("Isolated: %s = %q, want it unset", key, got)
		}
	}
	attr := func(p Policy) string {
		out, err := Cmd{Policy: p, GitDir: gitDir, Args: []string{"check-attr", "diff", "--", "x.txt"}}.Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	if got := attr(User); got != "x.txt: diff: unset" {
		t.Errorf("User: %q, want the global attributes file's", got)
	}
	if got := attr(Isolated); got != "x.txt: diff: unspecified" {
		t.Errorf("Isolated: %q, want no global attributes", got)
	}
	message := func(p Policy) string {
		out, err := Cmd{Policy: p, GitDir: gitDir, Args: []string{"log", "-1", "--format=%s", a}}.Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	if got := message(User); got != "B" {
		t.Errorf("User: commit %s reads %q, want its replacement B", a, got)
	}
	if got := message(Isolated); got != "A" {
		t.Errorf("Isolated: commit %s reads %q, want A itself (no replace refs)", a, got)
	}
	// GIT_DIR names the other repository: User follows it, Isolated finds
	// the repository of the directory it runs in.
	where := func(p Policy) string {
		out, err := Cmd{Policy: p, Dir: repo, Args: []string{"rev-parse", "--absolute-git-dir"}}.Output()
		if err != nil {
			t.Fatal(err)
		}
		got, _ := filepath.EvalSymlinks(strings.TrimSpace(string(out)))
		return got
	}
	wantOther, _ := filepath.EvalSymlinks(filepath.Join(other, ".git"))
	wantRepo, _ := filepath.EvalSymlinks(gitDir)
	if got := where(User); got != wantOther {
		t.Errorf("User: repository %s, want GIT_DIR's %s", got, wantOther)
	}
	if got := where(Isolated); got != wantRepo {
		t.Errorf("Isolated: repository %s, want %s", got, wantRepo)
	}
}

// TestIsolatedEnvironmentFromNothing: an Isolated call's environment holds
// only PATH, TMPDIR, git's own and tracing variables and the policy's; the
// user's others (an editor, a pager, a timezone) are not passed on.
func TestIsolatedEnvironmentFromNothing(t *testing.T) {
	t.Setenv("EDITOR", "vi")
	t.Setenv("GIT_PAGER", "less")
	t.Setenv("TZ", "Europe/Paris")
	t.Setenv("GIT_TRACE2_EVENT", "/dev/null")
	allowed := map[string]bool{"PATH": true, "TMPDIR": true, "LC_ALL": true, "LANGUAGE": true, "GIT_TRACE2_EVENT": true}
	for _, kv := range isolatedVars {
		k, _, _ := strings.Cut(kv, "=")
		allowed[k] = true
	}
	for _, kv := range Env(Isolated) {
		if k, _, _ := strings.Cut(kv, "="); !allowed[k] {
			t.Errorf("Isolated passes %s on", kv)
		}
	}
	if env := strings.Join(Env(User), "\n"); !strings.Contains(env, "EDITOR=vi") || !strings.Contains(env, "GIT_PAGER=less") {
		t.Errorf("User does not pass the user's environment on:\n%s", env)
	}
}

// TestMessagesInEnglish: both policies run git in the C locale, whose
// messages the callers read.
func TestMessagesInEnglish(t *testing.T) {
	t.Setenv("LC_ALL", "de_DE.UTF-8")
	t.Setenv("LANGUAGE", "de")
	for _, p := range []Policy{Isolated, User} {
		env := strings.Join(Env(p), "\n")
		if !strings.Contains(env, "\nLC_ALL=C\n") || strings.Contains(env, "de_DE") || strings.Contains(env, "LANGUAGE=de") {
			t.Errorf("policy %d: the locale is not C:\n%s", p, env)
		}
	}
}

// TestFileConfig: the plain reader of a repository's config file finds
// what git finds for the plain cases (the last value wins, sections and
// keys in any case, subsections as written) and nothing in another section.
func TestFileConfig(t *testing.T) {
	dir := t.TempDir()
	config := "[core]\n\tbare = false\n[Core]\n\tBare = true\n[remote \"origin\"]\n\turl = x\n[remote \"Other\"]\n[extensions]objectformat = sha1\n"
	os.WriteFile(filepath.Join(dir, "config"), []byte(config), 0o644)
	for _, c := range []struct{ section, key, want string }{
		{"core", "bare", "true"}, {"CORE", "BARE", "true"}, {"extensions", "objectformat", "sha1"}, {"remote", "url", ""}, {"core", "url", ""},
	} {
		if got := FileConfigValue(dir, c.section, c.key); got != c.want {
			t.Errorf("%s.%s = %q, want %q", c.section, c.key, got, c.want)
		}
		out, _, err := Cmd{Policy: Isolated, Args: []string{"config", "--file", filepath.Join(dir, "config"), "--get", c.section + "." + c.key}}.Run()
		if got := strings.TrimSpace(string(out)); (err == nil) != (c.want != "") || got != c.want {
			t.Errorf("git says %s.%s = %q (%v), the reader %q", c.section, c.key, got, err, c.want)
		}
	}
	if !FileHasSection(dir, "remote", "origin") || FileHasSection(dir, "remote", "ORIGIN") || FileHasSection(dir, "remote", "Other") {
		t.Errorf("remote sections: origin %v, ORIGIN %v, Other (no key) %v",
			FileHasSection(dir, "remote", "origin"), FileHasSection(dir, "remote", "ORIGIN"), FileHasSection(dir, "remote", "Other"))
	}
}
