package git

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRepositoryFormatFromConfig: the repository format is read from the
// repository's config file as git reads it; the quick check that spares
// starting git decides only configs git would read as sha1 with format
// version 0 or 1.
func TestRepositoryFormatFromConfig(t *testing.T) {
	cases := []struct {
		name, config string
		refuse       string // "" when accepted
	}{
		{"git init", "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n", ""},
		{"no spaces", "[core]\nrepositoryformatversion=0\n", ""},
		{"version 1", "[core]\n\trepositoryformatversion = 1\n", ""},
		{"version with comment", "[core]\n\trepositoryformatversion = 1 ; set by hand\n", ""},
		{"CRLF", "[core]\r\n\trepositoryformatversion = 0\r\n", ""},
		{"no version", "[core]\n\tbare = false\n", ""},
		{"empty", "", ""},
		{"explicit sha1", "[core]\n\trepositoryformatversion = 1\n[extensions]\n\tobjectformat = sha1\n", ""},
		{"explicit SHA1 in capitals", "[core]\n\trepositoryformatversion = 1\n[Extensions]\n\tObjectFormat = SHA1\n", ""},
		{"word in a URL", "[core]\n\trepositoryformatversion = 0\n[remote \"o\"]\n\turl = https://h.example/objectformat.git\n", ""},
		{"version 01", "[core]\n\trepositoryformatversion = 01\n", ""},
		{"sha256", "[core]\n\trepositoryformatversion = 1\n[extensions]\n\tobjectformat = sha256\n", "uses the sha256 object format; bernstein supports sha1 repositories only"},
		{"sha256 mixed case", "[CORE]\n\tRepositoryFormatVersion = 1\n[Extensions]\n\tObjectFormat = SHA256\n", "uses the sha256 object format"},
		{"sha256 quoted", "[core]\n\trepositoryformatversion = 1\n[extensions]\n\tobjectFormat = \"sha256\"\n", "uses the sha256 object format"},
		{"sha256 dotted section", "[core]\n\trepositoryformatversion = 1\n[extensions]objectformat=sha256\n", "uses the sha256 object format"},
		{"sha256 last wins", "[core]\n\trepositoryformatversion = 1\n[extensions]\n\tobjectformat = sha1\n\tobjectformat = sha256\n", "sha256 object format"},
		{"sha256 at version 0", "[core]\n\trepositoryformatversion = 0\n[extensions]\n\tobjectformat = sha256\n", "sha256 object format"},
		{"compat map", "[core]\n\trepositoryformatversion = 1\n[extensions]\n\tobjectformat = sha1\n\tcompatObjectFormat = sha256\n", "keeps a sha256 map of its objects"},
		{"version 2", "[core]\n\trepositoryformatversion = 2\n", "has format version 2"},
		{"version 10", "[core]\n\trepositoryformatversion = 10\n", "has format version 10"},
		{"version not a number", "[core]\n\trepositoryformatversion = one\n", "not a format version"},
		{"version later set to 2", "[core]\n\trepositoryformatversion = 0\n[core]\n\trepositoryformatversion = 2\n", "has format version 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "config"), []byte(c.config), 0o644); err != nil {
				t.Fatal(err)
			}
			err := CheckObjectFormat(dir)
			if c.refuse == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			} else {
				if !errors.Is(err, ErrRepositoryFormat) || !strings.Contains(err.Error(), c.refuse) || !strings.Contains(err.Error(), dir) {
					t.Fatalf("got %v, want a refusal naming %s and saying %q", err, dir, c.refuse)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Fatalf("the refusal is not one line: %q", err)
				}
			}
			// The quick check never passes what git reads otherwise.
			if plainFormat([]byte(c.config)) {
				vals, gerr := repoFormatConfig(filepath.Join(dir, "config"))
				if gerr != nil {
					t.Fatal(gerr)
				}
				if v := vals["core.repositoryformatversion"]; v != "" && v != "0" && v != "1" {
					t.Fatalf("quick check passed version %q", v)
				}
				for k := range vals {
					if strings.HasPrefix(k, "extensions.") && strings.Contains(k, "objectformat") {
						t.Fatalf("quick check passed %s", k)
					}
				}
			}
		})
	}

	// No config file: git's defaults.
	if err := CheckObjectFormat(t.TempDir()); err != nil {
		t.Errorf("no config: %v", err)
	}
	// A config git cannot parse is reported, not taken for sha1.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config"), []byte("[core]\n\trepositoryformatversion = 1\n[extensions\n\tobjectformat = sha256\n"), 0o644)
	if err := CheckObjectFormat(dir); err == nil {
		t.Errorf("an unparsable config was accepted")
	}
}
