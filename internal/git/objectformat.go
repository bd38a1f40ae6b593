package git

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrRepositoryFormat is wrapped by the error Open and Init return for a
// repository whose format bernstein cannot write safely (see
// CheckObjectFormat).
var ErrRepositoryFormat = errors.New("unsupported repository format")

// RepositoryFormatError names the repository and what about its format was
// refused.
type RepositoryFormatError struct {
	GitDir string
	Msg    string
}

func (e *RepositoryFormatError) Error() string { return "repository " + e.GitDir + " " + e.Msg }

func (e *RepositoryFormatError) Unwrap() error { return ErrRepositoryFormat }

// sha1Only ends the message of every object-format refusal.
const sha1Only = "bernstein supports sha1 repositories only: it writes SHA-1 objects and packs itself, and would damage this one (nothing was written)"

// CheckObjectFormat refuses a repository that git does not address by
// SHA-1 alone. bernstein writes objects, packs and pack indexes itself, all
// SHA-1 (git's version-2 index): in a sha256 repository they are garbage
// that git then reports on every `log`, `fsck` and `gc`. So the format is
// checked before anything is read or written.
//
// git reads a repository's format from its own config file (never from the
// user's, never through includes): core.repositoryFormatVersion and, from
// version 1, the extensions. A config that mentions no object format is a
// SHA-1 repository; that case is decided from the file alone, without
// starting git. Otherwise git's own parser gives the values.
func CheckObjectFormat(commonDir string) error {
	path := filepath.Join(commonDir, "config")
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil // no config: git's defaults, version 0 and SHA-1
	}
	if err != nil {
		return err
	}
	if plainFormat(b) {
		return nil
	}
	vals, err := repoFormatConfig(path)
	if err != nil {
		return err
	}
	refuse := func(format string, args ...any) error {
		return &RepositoryFormatError{GitDir: commonDir, Msg: fmt.Sprintf(format, args...)}
	}
	version := 0
	if v, ok := vals["core.repositoryformatversion"]; ok {
		if version, err = strconv.Atoi(strings.TrimSpace(v)); err != nil || version < 0 {
			return refuse("has core.repositoryFormatVersion %q, which is not a format version git knows (0 or 1)", v)
		}
	}
	if version > 1 {
		return refuse("has format version %d, which git itself does not know (it knows 0 and 1)", version)
	}
	if of, ok := vals["extensions.objectformat"]; ok && !strings.EqualFold(strings.TrimSpace(of), "sha1") {
		return refuse("uses the %s object format; %s", strings.ToLower(strings.TrimSpace(of)), sha1Only)
	}
	if cf, ok := vals["extensions.compatobjectformat"]; ok {
		return refuse("keeps a %s map of its objects (extensions.compatObjectFormat) that bernstein's writes would not update; %s", strings.ToLower(strings.TrimSpace(cf)), sha1Only)
	}
	return nil
}

// plainFormat reports whether a config file, as bytes, certainly describes
// a SHA-1 repository of format version 0 or 1: it names no object format
// anywhere, and every repositoryformatversion in it reads `= 0` or `= 1`.
// Anything else (including unusual spellings git would still accept) is
// left to git to parse.
func plainFormat(config []byte) bool {
	lower := bytes.ToLower(config)
	if bytes.Contains(lower, []byte("objectformat")) {
		return false
	}
	const key = "repositoryformatversion"
	for rest := lower; ; {
		i := bytes.Index(rest, []byte(key))
		if i < 0 {
			return true
		}
		rest = rest[i+len(key):]
		v := bytes.TrimLeft(rest, " \t")
		if len(v) == 0 || v[0] != '=' {
			return false
		}
		v = bytes.TrimLeft(v[1:], " \t")
		if len(v) == 0 || (v[0] != '0' && v[0] != '1') {
			return false
		}
		if end := bytes.TrimLeft(v[1:], " \t\r"); len(end) > 0 && end[0] != '\n' && end[0] != '#' && end[0] != ';' {
			return false
		}
	}
}

// repoFormatConfig reads core.repositoryformatversion and the extensions
// from one config file with git's parser (the last value of a key wins, as
// in git).
func repoFormatConfig(path string) (map[string]string, error) {
	out, stderr, err := Cmd{Policy: Isolated, Args: []string{"config", "--file", path, "--null", "--get-regexp", `^(core\.repositoryformatversion|extensions\..*)$`}}.Run()
	if ExitCode(err) == 1 && len(stderr) == 0 {
		return map[string]string{}, nil // none of the keys is set
	}
	if err != nil {
		return nil, fmt.Errorf("reading the repository format from %s: %s", path, strings.TrimSpace(strings.TrimPrefix(string(stderr), "fatal: ")))
	}
	vals := map[string]string{}
	for _, ent := range bytes.Split(out, []byte{0}) {
		if len(ent) == 0 {
			continue
		}
		k, v, _ := bytes.Cut(ent, []byte{'\n'})
		vals[strings.ToLower(string(k))] = string(v)
	}
	return vals, nil
}
