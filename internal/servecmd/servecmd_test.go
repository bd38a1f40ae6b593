package servecmd

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestPassOn: the flags given, as given, in --name=value form; defaults
// and the environment are not passed on.
func TestPassOn(t *testing.T) {
	t.Setenv("BERNSTEIN_READ_TOKEN", "brt_environment-0123456789")
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	var o ServeFlags
	o.Bind(fs)
	repo := fs.String("repo", "", "")
	if err := fs.Parse([]string{"--allow-remote", "--repo", "/a=b c", "--read-token="}); err != nil {
		t.Fatal(err)
	}
	got := PassOn("serve", fs)
	want := []string{"serve", "--allow-remote=true", "--read-token=", "--repo=/a=b c"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("PassOn: %q, want %q", got, want)
	}
	// What the server program parses from it is what was parsed here.
	again := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	var o2 ServeFlags
	o2.Bind(again)
	repo2 := again.String("repo", "", "")
	if err := again.Parse(got[1:]); err != nil || o2 != o || *repo2 != *repo || !again.Changed("read-token") || again.Changed("addr") {
		t.Fatalf("parsed again: %+v %q %v, want %+v %q", o2, *repo2, err, o, *repo)
	}
}

func executable(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestLocate: beside the program first, then on PATH; missing, an error
// that says what to install.
func TestLocate(t *testing.T) {
	beside, onPath := t.TempDir(), t.TempDir()
	self := filepath.Join(beside, "bernstein")
	executable(t, filepath.Join(onPath, Program))
	t.Setenv("PATH", onPath)
	if got, err := Locate(self); err != nil || got != filepath.Join(onPath, Program) {
		t.Errorf("on PATH only: %q %v", got, err)
	}
	executable(t, filepath.Join(beside, Program))
	if got, err := Locate(self); err != nil || got != filepath.Join(beside, Program) {
		t.Errorf("beside and on PATH: %q %v", got, err)
	}
	os.Chmod(filepath.Join(beside, Program), 0o644) // not executable: not taken
	if got, err := Locate(self); err != nil || got != filepath.Join(onPath, Program) {
		t.Errorf("a non-executable file beside: %q %v", got, err)
	}
	t.Setenv("PATH", t.TempDir())
	_, err := Locate(self)
	if err == nil || !strings.Contains(err.Error(), "found neither at "+filepath.Join(beside, Program)+" nor on PATH") || !strings.Contains(err.Error(), "go install github.com/bernstein/bernstein/cmd/...@latest") {
		t.Errorf("missing: %v", err)
	}
}
